// The incremental BPE trainer learns exactly what the obvious algorithm does (recount every pair
// after every merge), on generated corpora full of ties and overlapping pairs, and on the synthetic
// tokenizer's sample text.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <unordered_map>

#include "base/error.h"
#include "text/bpe_ranks.h"
#include "text/bpe_trainer.h"
#include "text/synth_sample_text.h"

namespace k3 {
namespace {

// The reference: the synthetic tokenizer's original trainer.  Each round counts every adjacent pair
// over all words, merges the most frequent (ties: the lowest (a, b)) left to right in every word,
// and adds its bytes as a token unless they already are one.
std::vector<std::string> naive_bpe_tokens(const std::vector<BpeWord>& input, int n_ranks) {
  struct Word {
    std::vector<int32_t> symbols;
    int64_t count = 0;
  };
  std::vector<std::string> tokens;
  std::unordered_map<std::string, int32_t> ids;
  for (int b = 0; b < 256; ++b) {
    tokens.emplace_back(1, static_cast<char>(b));
    ids[tokens.back()] = b;
  }
  std::vector<Word> words;
  for (const BpeWord& in : input) {
    Word w;
    w.count = in.count;
    for (const char c : in.bytes) w.symbols.push_back(static_cast<unsigned char>(c));
    words.push_back(std::move(w));
  }
  while (static_cast<int>(tokens.size()) < n_ranks) {
    std::unordered_map<uint64_t, int64_t> pairs;  // (a << 32 | b) -> weighted count
    for (const Word& w : words)
      for (size_t i = 0; i + 1 < w.symbols.size(); ++i)
        pairs[(uint64_t(w.symbols[i]) << 32) | uint32_t(w.symbols[i + 1])] += w.count;
    if (pairs.empty()) break;
    uint64_t best = 0;
    int64_t best_count = 0;
    for (const auto& [key, count] : pairs)
      if (count > best_count || (count == best_count && key < best)) {
        best = key;
        best_count = count;
      }
    const int32_t a = static_cast<int32_t>(best >> 32), b = static_cast<int32_t>(best & 0xFFFFFFFFu);
    const std::string merged = tokens[a] + tokens[b];
    auto found = ids.find(merged);
    int32_t id = 0;
    if (found != ids.end()) {
      id = found->second;
    } else {
      id = static_cast<int32_t>(tokens.size());
      tokens.push_back(merged);
      ids[merged] = id;
    }
    for (Word& w : words) {
      std::vector<int32_t> out;
      for (size_t i = 0; i < w.symbols.size(); ++i) {
        if (i + 1 < w.symbols.size() && w.symbols[i] == a && w.symbols[i + 1] == b) {
          out.push_back(id);
          ++i;
        } else {
          out.push_back(w.symbols[i]);
        }
      }
      w.symbols = std::move(out);
    }
  }
  for (uint32_t k = 0; static_cast<int>(tokens.size()) < n_ranks; ++k)
    tokens.push_back(std::string("\xFF") + static_cast<char>((k >> 16) & 0xFF) + static_cast<char>((k >> 8) & 0xFF) +
                     static_cast<char>(k & 0xFF));
  return tokens;
}

// n distinct random words over `alphabet` (UTF-8 characters), 1 to max_len characters, with counts
// from 1 to max_count (small counts: many ties).
std::vector<BpeWord> random_words(uint32_t seed, const std::vector<std::string>& alphabet, int n, int max_len,
                                  int max_count) {
  std::mt19937 rng(seed);
  std::map<std::string, int64_t> words;
  for (int i = 0; i < n; ++i) {
    std::string w;
    const int len = 1 + static_cast<int>(rng() % max_len);
    for (int j = 0; j < len; ++j) w += alphabet[rng() % alphabet.size()];
    words[w] += 1 + static_cast<int64_t>(rng() % max_count);
  }
  std::vector<BpeWord> out;
  for (const auto& [bytes, count] : words) out.push_back({bytes, count});
  return out;
}

// Text of random words with spaces, punctuation, digits and newlines, for the pre-tokenizer.
std::string random_text(uint32_t seed, int n_words) {
  std::mt19937 rng(seed);
  const std::vector<std::string> stems = {"the", "an", "ing", "tion", "qu", "é", "中文", "er", "th", "s", "a"};
  const std::vector<std::string> gaps = {" ", " ", " ", ", ", ". ", "\n", "  ", "\t", "(", ")", " 12", "345 "};
  std::string text;
  for (int i = 0; i < n_words; ++i) {
    const int parts = 1 + static_cast<int>(rng() % 4);
    for (int p = 0; p < parts; ++p) text += stems[rng() % stems.size()];
    text += gaps[rng() % gaps.size()];
  }
  return text;
}

TEST(BpeTrainer, MatchesTheNaiveTrainerOnGeneratedCorpora) {
  struct Corpus {
    std::string name;
    std::vector<BpeWord> words;
  };
  std::vector<Corpus> corpora;
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    // Two letters: long runs of one letter (overlapping pairs) and ties everywhere.
    corpora.push_back({"ab-" + std::to_string(seed), random_words(seed, {"a", "b"}, 200, 14, 3)});
    corpora.push_back({"a-" + std::to_string(seed), random_words(seed, {"a"}, 40, 40, 5)});
    corpora.push_back({"mixed-" + std::to_string(seed),
                       random_words(seed, {"x", "y", "z", "é", "中", " ", "0"}, 400, 10, 50)});
    corpora.push_back({"text-" + std::to_string(seed), count_bpe_words(random_text(seed, 3000))});
  }
  for (const Corpus& c : corpora)
    for (const int n_ranks : {256, 257, 300, 700, 3000})
      EXPECT_EQ(learn_bpe_tokens(c.words, n_ranks), naive_bpe_tokens(c.words, n_ranks)) << c.name << " " << n_ranks;
}

TEST(BpeTrainer, MatchesTheNaiveTrainerOnTheSampleText) {
  const std::vector<BpeWord> words = count_bpe_words(synth_sample_text());
  for (const int n_ranks : {512, 1792, 3840})
    EXPECT_EQ(learn_bpe_tokens(words, n_ranks), naive_bpe_tokens(words, n_ranks)) << n_ranks;
  EXPECT_EQ(train_bpe_tokens(synth_sample_text(), 1000), naive_bpe_tokens(words, 1000));
}

TEST(BpeTrainer, TiesGoToTheLowestPairAndMergesRunLeftToRight) {
  // (a,b), (b,a) and (c,d) once each: the lowest pair first, then the next lowest.
  std::vector<std::string> t = learn_bpe_tokens({{"cd", 1}, {"ab", 1}, {"ba", 1}}, 259);
  EXPECT_EQ(std::vector<std::string>(t.begin() + 256, t.end()), (std::vector<std::string>{"ab", "ba", "cd"}));
  // "aaaaa": (a,a) -> [aa, aa, a]; then (aa, a) = (256, 97) is lower than (aa, aa) = (256, 256).
  t = learn_bpe_tokens({{"aaaaa", 1}}, 261);
  EXPECT_EQ(std::vector<std::string>(t.begin() + 256, t.begin() + 259),
            (std::vector<std::string>{"aa", "aaa", "aaaaa"}));
  // Then the pairs run out: filler tokens, 0xFF and a 3-byte counter.
  EXPECT_EQ(t[259], std::string("\xFF\0\0\0", 4));
  EXPECT_EQ(t[260], std::string("\xFF\0\0\1", 4));
  // The most frequent pair wins over a lower one.
  t = learn_bpe_tokens({{"ab", 2}, {"yz", 3}}, 257);
  EXPECT_EQ(t[256], "yz");
}

TEST(BpeTrainer, WordOrderDoesNotMatter) {
  std::vector<BpeWord> words = random_words(7, {"p", "q", "r", "s"}, 300, 9, 4);
  const std::vector<std::string> want = learn_bpe_tokens(words, 800);
  std::reverse(words.begin(), words.end());
  EXPECT_EQ(learn_bpe_tokens(words, 800), want);
  std::shuffle(words.begin(), words.end(), std::mt19937(3));
  EXPECT_EQ(learn_bpe_tokens(words, 800), want);
}

TEST(BpeTrainer, CountsPiecesOfSanitizedText) {
  const auto as_map = [](const std::vector<BpeWord>& words) {
    std::map<std::string, int64_t> m;
    for (const BpeWord& w : words) m[w.bytes] = w.count;
    return m;
  };
  const std::vector<BpeWord> words = count_bpe_words("the cat, the hat. The cat");
  EXPECT_EQ(as_map(words), (std::map<std::string, int64_t>{
                               {"the", 1}, {" cat", 2}, {",", 1}, {" the", 1}, {" hat", 1}, {".", 1}, {" The", 1}}));
  EXPECT_TRUE(std::is_sorted(words.begin(), words.end(),
                             [](const BpeWord& a, const BpeWord& b) { return a.bytes < b.bytes; }));
  EXPECT_TRUE(count_bpe_words("").empty());
  // Ill-formed UTF-8 is trained on as Tokenizer::encode sees it: with U+FFFD in its place.
  EXPECT_EQ(as_map(count_bpe_words("hat\xFF\xFE cat")), as_map(count_bpe_words("hat\xEF\xBF\xBD\xEF\xBF\xBD cat")));
  // Learned tokens and filler are distinct and load as ranks.
  EXPECT_NO_THROW(BpeRanks{train_bpe_tokens("x\xFF\xFEy x\xFF\xFEy", 400)});
}

TEST(BpeTrainer, BadArgumentsThrow) {
  EXPECT_THROW(learn_bpe_tokens({}, 255), Error);
  EXPECT_THROW(learn_bpe_tokens({}, 256 + (1 << 24) + 1), Error);
  EXPECT_THROW(learn_bpe_tokens({{"ab", 0}}, 300), Error);
  EXPECT_THROW(learn_bpe_tokens({{"a\xFF", 1}}, 300), Error);
  EXPECT_EQ(learn_bpe_tokens({}, 256).size(), 256u);
}

}  // namespace
}  // namespace k3
