// A tiktoken-compatible byte-level BPE tokenizer (the Kimi `TikTokenTokenizer`, and OpenAI's
// cl100k_base / o200k_base for cross-checking against the real tiktoken).
//
// encode(text, allow_special):
//   1. invalid UTF-8 in `text` is replaced by U+FFFD first (one per maximal ill-formed subpart, as
//      Python's decode(errors="replace")), so any byte string encodes and round-trips as that
//      sanitized text;
//   2. with Kimi chunking (the k3 pattern), the text is cut into 400,000-character windows and
//      inside each so that no run of consecutive whitespace or non-whitespace characters (Python
//      str.isspace) is longer than 25,000; chunks are encoded independently (tokenization_kimi.py);
//   3. allow_special = false (the default): special-token text is ordinary text.  true: every
//      literal occurrence of a special token's text becomes its id (earliest, then longest match),
//      and the text around it is encoded on its own;
//   4. each regex piece: its bytes as one token if they are one, else BPE (bpe.h).
// No BOS/EOS is ever added.  decode() concatenates token bytes (special ids give their text) and
// replaces invalid UTF-8 by U+FFFD; decode_bytes() returns the raw bytes.  Unknown ids throw.
// Thread-safe for concurrent const use.
//
// check_tokenizer_against_config() checks, where a checkpoint's tokenizer is loaded next to its
// model, that the two agree: every token id fits the embedding table (ranks + specials <=
// config.json's vocab_size), the config's bos/pad ids are the tokenizer's bos/pad special tokens,
// and its stop (eos) ids and media placeholder id are special tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "text/bpe_ranks.h"
#include "text/pretokenizer.h"
#include "text/special_tokens.h"
#include "text/tokenizer_presets.h"

namespace k3 {

struct ModelConfig;

class Tokenizer {
 public:
  Tokenizer(BpeRanks ranks, SpecialTokens specials, const std::string& pattern, bool kimi_chunking);

  // A tiktoken rank file with a preset's pattern and specials.
  static Tokenizer from_tiktoken(const std::string& path, TokenizerPreset preset);
  // A checkpoint directory: tiktoken.model + tokenizer_config.json (256 specials after the ranks;
  // K3's own names when the config is absent), the k3 pattern and chunking.
  static Tokenizer from_model_dir(const std::string& dir);

  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const;
  void encode_append(std::string_view text, bool allow_special, std::vector<int32_t>& out) const;

  std::string decode(std::span<const int32_t> ids) const;
  std::string decode_bytes(std::span<const int32_t> ids) const;
  // Bytes of one token (a special's text for a special id); throws k3::Error for an unknown id.
  std::string_view token_bytes(int32_t id) const;

  bool is_special(int32_t id) const { return specials_.text(id) != nullptr; }
  std::optional<int32_t> special_id(std::string_view text) const { return specials_.id(text); }
  // The id of a special token that must exist (throws k3::Error naming it otherwise).
  int32_t require_special(std::string_view text) const;

  const SpecialTokens& specials() const { return specials_; }
  const BpeRanks& ranks() const { return ranks_; }
  const Pretokenizer& pretokenizer() const { return pretokenizer_; }
  bool kimi_chunking() const { return kimi_chunking_; }
  // One past the largest id (ordinary or special).
  int32_t vocab_size() const { return vocab_size_; }

  // The checkpoint directory from_model_dir read ("" otherwise).
  const std::string& model_dir() const { return model_dir_; }
  // The special tokens tokenizer_config.json names bos_token / eos_token / pad_token (with the
  // text as written), when it names them.
  struct Role {
    std::string text;
    std::optional<int32_t> id;  // none: the text is no special token of this tokenizer
  };
  const std::optional<Role>& bos() const { return bos_; }
  const std::optional<Role>& eos() const { return eos_; }
  const std::optional<Role>& pad() const { return pad_; }

 private:
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;

  BpeRanks ranks_;
  SpecialTokens specials_;
  Pretokenizer pretokenizer_;
  bool kimi_chunking_ = false;
  int32_t vocab_size_ = 0;
  std::string model_dir_;
  std::optional<Role> bos_, eos_, pad_;
};

// Throws k3::Error listing every disagreement between a checkpoint's tokenizer (loaded by
// from_model_dir) and its config.json, naming the files and ids at fault.
void check_tokenizer_against_config(const Tokenizer& tokenizer, const ModelConfig& config);

}  // namespace k3
