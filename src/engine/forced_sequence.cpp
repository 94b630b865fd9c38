#include "engine/forced_sequence.h"

#include <algorithm>

#include "engine/json_constraint.h"
#include "text/tokenizer.h"

namespace k3 {

FrameTokens::FrameTokens(const Tokenizer& tokenizer)
    : open(tokenizer.require_special("<|open|>")),
      close(tokenizer.require_special("<|close|>")),
      sep(tokenizer.require_special("<|sep|>")),
      end(tokenizer.require_special("<|end_of_msg|>")) {}

void ForcedSequence::assign(std::vector<Item> items) {
  items_.assign(items.begin(), items.end());
  pos_ = 0;
}

std::vector<int32_t> ForcedSequence::allowed(const VocabIndex& index, bool longest) const {
  if (items_.empty()) return {};
  const Item& f = items_.front();
  if (f.special >= 0) return {f.special};
  std::vector<int32_t> out;
  for (const std::string& t : f.texts) {
    const std::string_view rest = std::string_view(t).substr(pos_);
    if (longest) {
      if (const int32_t id = index.longest_prefix_of(rest); id >= 0) out.push_back(id);
      continue;
    }
    const std::vector<int32_t> p = index.prefixes_of(rest);
    out.insert(out.end(), p.begin(), p.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void ForcedSequence::accept(int32_t token, const Tokenizer& tokenizer) {
  if (items_.empty()) return;
  Item& f = items_.front();
  bool done = f.special >= 0;
  if (!done) {
    const std::string_view b = tokenizer.token_bytes(token);
    std::vector<std::string> keep;
    for (std::string& t : f.texts)
      if (std::string_view(t).substr(pos_).substr(0, b.size()) == b) keep.push_back(std::move(t));
    f.texts = std::move(keep);
    pos_ += b.size();
    const auto whole = std::find_if(f.texts.begin(), f.texts.end(), [&](const std::string& t) { return t.size() == pos_; });
    done = f.texts.empty() || whole != f.texts.end();
    if (whole != f.texts.end()) last_ = *whole;
  }
  if (done) {
    items_.pop_front();
    pos_ = 0;
  }
}

namespace {

int64_t item_tokens(const VocabIndex& index, const ForcedSequence::Item& item, size_t pos) {
  if (item.special >= 0) return 1;
  int64_t most = 0;
  for (const std::string& t : item.texts)
    most = std::max(most, index.longest_match_tokens(std::string_view(t).substr(std::min(pos, t.size()))));
  return most;
}

}  // namespace

int64_t ForcedSequence::tokens_left(const VocabIndex& index) const {
  int64_t n = 0;
  for (size_t i = 0; i < items_.size(); ++i) n += item_tokens(index, items_[i], i == 0 ? pos_ : 0);
  return n;
}

int64_t ForcedSequence::tokens(const VocabIndex& index, const std::vector<Item>& items) {
  int64_t n = 0;
  for (const Item& item : items) n += item_tokens(index, item, 0);
  return n;
}

std::vector<ForcedSequence::Item> think_to_response(const FrameTokens& t) {
  using F = ForcedSequence;
  return {F::text("think"), F::special(t.sep), F::special(t.open), F::text("response"), F::special(t.sep)};
}

}  // namespace k3
