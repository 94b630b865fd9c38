#include "text/bpe_trainer.h"

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "base/error.h"
#include "text/pretokenizer.h"
#include "text/tokenizer_presets.h"
#include "text/utf8.h"

namespace k3 {
namespace {

constexpr int kMaxFillerTokens = 1 << 24;  // the 3-byte counter after 0xFF

// A pair of token ids as one number; its order is the tie rule's (lowest a, then lowest b).
uint64_t merge_pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

// A heap entry: a pair and its count when it was pushed.  It is stale once the count has changed
// (a newer entry then holds the current count) and is dropped when it reaches the top.
struct PairHeapEntry {
  int64_t count;
  uint64_t key;
  // std::priority_queue keeps the greatest on top: the most frequent pair, ties the lowest key.
  bool operator<(const PairHeapEntry& o) const { return count != o.count ? count < o.count : key > o.key; }
};

// The words as token ids, with the counts of their adjacent pairs kept up to date across merges.
class PairMerger {
 public:
  explicit PairMerger(const std::vector<BpeWord>& words) {
    for (const BpeWord& word : words) {
      K3_CHECK(word.count >= 1, "BPE training: word count ", word.count, " must be at least 1");
      // Pieces of UTF-8 text never hold 0xFF; a token with it could collide with a filler token.
      K3_CHECK(word.bytes.find('\xFF') == std::string::npos, "BPE training: a word contains byte 0xFF");
      if (word.bytes.size() < 2) continue;  // a single byte has no pair to merge
      std::vector<int32_t> s;
      for (const char c : word.bytes) s.push_back(static_cast<unsigned char>(c));  // byte b is token b
      const int32_t w = static_cast<int32_t>(symbols_.size());
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const uint64_t key = merge_pair_key(s[i], s[i + 1]);
        pair_counts_[key] += word.count;
        std::vector<int32_t>& list = words_with_[key];
        if (list.empty() || list.back() != w) list.push_back(w);
      }
      symbols_.push_back(std::move(s));
      counts_.push_back(word.count);
    }
    visited_.assign(symbols_.size(), 0);
    for (const auto& [key, count] : pair_counts_) heap_.push({count, key});
  }

  // Takes the most frequent pair (ties: the lowest key) into key; false when no pair is left.
  bool next(uint64_t& key) {
    while (!heap_.empty()) {
      const PairHeapEntry top = heap_.top();
      heap_.pop();
      const auto it = pair_counts_.find(top.key);
      if (it != pair_counts_.end() && it->second == top.count) {
        key = top.key;
        return true;
      }
    }
    return false;
  }

  // Replaces the pair `key` by `id` in every word, left to right without overlap.  Only the words
  // that hold the pair are rewritten and recounted.  Afterwards the pair occurs nowhere (a leftover
  // a,b would have been merged), so its count and index entry are gone.
  void merge(uint64_t key, int32_t id) {
    ++merges_;
    const int32_t a = static_cast<int32_t>(key >> 32), b = static_cast<int32_t>(key & 0xFFFFFFFFu);
    auto node = words_with_.extract(key);
    if (node.empty()) return;
    std::vector<int32_t> out;
    for (const int32_t w : node.mapped()) {
      if (visited_[w] == merges_) continue;  // listed twice: already done in this merge
      visited_[w] = merges_;
      std::vector<int32_t>& s = symbols_[w];
      out.clear();
      bool changed = false;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          out.push_back(id);
          ++i;
          changed = true;
        } else {
          out.push_back(s[i]);
        }
      }
      if (!changed) continue;  // a stale index entry: an earlier merge took the pair from this word
      const int64_t count = counts_[w];
      for (size_t i = 0; i + 1 < s.size(); ++i) delta_[merge_pair_key(s[i], s[i + 1])] -= count;
      for (size_t i = 0; i + 1 < out.size(); ++i) {
        const uint64_t k = merge_pair_key(out[i], out[i + 1]);
        delta_[k] += count;
        // A pair without `id` was in the word before, at the same place, so the word is already
        // in its list; the pairs with `id` are new to this word.
        if (out[i] == id || out[i + 1] == id) {
          std::vector<int32_t>& list = words_with_[k];
          if (list.empty() || list.back() != w) list.push_back(w);
        }
      }
      s.swap(out);
    }
    for (const auto& [k, d] : delta_) {
      if (d == 0) continue;
      const int64_t count = pair_counts_[k] += d;
      if (count == 0) {
        pair_counts_.erase(k);
      } else {
        heap_.push({count, k});
      }
    }
    delta_.clear();
  }

 private:
  std::vector<std::vector<int32_t>> symbols_;  // per word of two or more bytes: its token ids
  std::vector<int64_t> counts_;                // per word: how often it occurs
  std::unordered_map<uint64_t, int64_t> pair_counts_;  // pair -> weighted count (> 0)
  // pair -> the words that hold it: every holder is listed, and a list may also name words that no
  // longer hold it, or a word twice (merge() skips both).
  std::unordered_map<uint64_t, std::vector<int32_t>> words_with_;
  std::priority_queue<PairHeapEntry> heap_;  // a current entry for every pair, and stale ones
  std::vector<uint32_t> visited_;            // per word: the last merge that rewrote it or skipped it
  uint32_t merges_ = 0;
  std::unordered_map<uint64_t, int64_t> delta_;  // scratch: count changes during one merge
};

// Hashes std::string and std::string_view alike, so a piece is looked up without a copy.
struct PieceHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace

std::vector<BpeWord> count_bpe_words(std::string_view text, const BpeProgress& progress) {
  std::string sanitized;
  if (!utf8::is_valid(text)) {
    sanitized = utf8::sanitize(text);
    text = sanitized;
  }
  std::unordered_map<std::string, int64_t, PieceHash, std::equal_to<>> counts;
  int64_t reported = 0;
  Pretokenizer(preset_pattern(TokenizerPreset::kK3)).for_each_piece(text, [&](std::string_view piece) {
    const auto it = counts.find(piece);
    if (it != counts.end()) {
      ++it->second;
    } else {
      counts.emplace(piece, 1);
    }
    const int64_t done = piece.data() + piece.size() - text.data();
    if (progress && done - reported >= (1 << 20)) progress(reported = done);
  });
  if (progress) progress(static_cast<int64_t>(text.size()));
  std::vector<BpeWord> words;
  words.reserve(counts.size());
  while (!counts.empty()) {
    auto node = counts.extract(counts.begin());
    words.push_back({std::move(node.key()), node.mapped()});
  }
  std::sort(words.begin(), words.end(), [](const BpeWord& x, const BpeWord& y) { return x.bytes < y.bytes; });
  return words;
}

std::vector<std::string> learn_bpe_tokens(const std::vector<BpeWord>& words, int n_ranks, const BpeProgress& progress) {
  K3_CHECK(n_ranks >= 256 && n_ranks <= 256 + kMaxFillerTokens, "BPE training: ", n_ranks,
           " ranks is out of range [256, ", 256 + kMaxFillerTokens, "]");
  std::vector<std::string> tokens;
  tokens.reserve(n_ranks);
  std::unordered_map<std::string, int32_t> ids;
  for (int b = 0; b < 256; ++b) {
    tokens.emplace_back(1, static_cast<char>(b));
    ids[tokens.back()] = b;
  }
  PairMerger merger(words);
  uint64_t key = 0;
  while (static_cast<int>(tokens.size()) < n_ranks && merger.next(key)) {
    std::string merged = tokens[key >> 32] + tokens[key & 0xFFFFFFFFu];
    const auto [it, added] = ids.emplace(std::move(merged), static_cast<int32_t>(tokens.size()));
    if (added) {
      tokens.push_back(it->first);
      if (progress) progress(static_cast<int64_t>(tokens.size()));
    }
    merger.merge(key, it->second);
  }
  for (uint32_t k = 0; static_cast<int>(tokens.size()) < n_ranks; ++k)
    tokens.push_back(std::string("\xFF") + static_cast<char>((k >> 16) & 0xFF) + static_cast<char>((k >> 8) & 0xFF) +
                     static_cast<char>(k & 0xFF));
  return tokens;
}

std::vector<std::string> train_bpe_tokens(std::string_view text, int n_ranks) {
  return learn_bpe_tokens(count_bpe_words(text), n_ranks);
}

}  // namespace k3
