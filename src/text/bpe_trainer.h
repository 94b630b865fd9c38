// Byte-level BPE training: learns the ordinary tokens of a tiktoken-style vocabulary (bpe_ranks.h)
// from text, as k3's synthetic tokenizer (synth_tokenizer.h) and `k3 train-tokenizer` use it.
//
// The text is pre-tokenized with the K3 regex (pretokenizer.h; ill-formed UTF-8 first replaced by
// U+FFFD, as Tokenizer::encode does), so merges never cross piece boundaries.  Ranks 0..255 are the
// single bytes (rank = byte value).  Then, repeatedly, the most frequent adjacent pair of tokens
// (counted over the distinct pieces, each weighted by how often it occurs; ties: the lowest pair
// (a, b), compared as a << 32 | b) is merged in every piece, left to right without overlap, and its
// bytes become the next rank: the order in which tiktoken later applies the merges.  When those
// bytes are already a token (two different pairs can spell the same bytes), the merge uses that
// token and adds no rank.  If the pairs run out before n_ranks tokens, the remaining ranks are
// filler tokens: 0xFF followed by a 3-byte counter.  0xFF never occurs in UTF-8, so a filler token
// decodes but encode never produces it, and the filler tokens are exactly those whose first byte
// is 0xFF.
//
// Training is incremental: pair counts are kept, and after a merge only the pieces that contained
// the pair (found through a pair -> pieces index) are recounted; the next pair comes from a max-heap
// whose stale entries are skipped when they reach the top.  A merge thus costs time in proportion
// to the pieces it changes, not to the corpus, and the result is the same as recounting every pair
// after every merge.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace k3 {

// A distinct pre-tokenized piece and how many times it occurs (count >= 1).
struct BpeWord {
  std::string bytes;
  int64_t count = 0;
};

// For progress lines: count_bpe_words reports the bytes of text pre-tokenized so far (about every
// MiB, and at the end); learn_bpe_tokens the number of tokens after each newly learned one.
using BpeProgress = std::function<void(int64_t done)>;

// The distinct pieces of text under the K3 pattern, with their counts, sorted by bytes.
std::vector<BpeWord> count_bpe_words(std::string_view text, const BpeProgress& progress = {});

// Exactly n_ranks tokens by rank (256 <= n_ranks <= 256 + 2^24, the filler counter's range; throws
// k3::Error otherwise), learned from words; the order of words does not matter.
std::vector<std::string> learn_bpe_tokens(const std::vector<BpeWord>& words, int n_ranks,
                                          const BpeProgress& progress = {});

// learn_bpe_tokens(count_bpe_words(text), n_ranks).
std::vector<std::string> train_bpe_tokens(std::string_view text, int n_ranks);

}  // namespace k3
