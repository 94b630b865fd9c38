#include "text/tokenizer_presets.h"

#include "base/error.h"

namespace k3 {
namespace {

const std::string kK3Pattern =
    R"re([\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

const std::string kCl100kPattern =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

const std::string kO200kPattern =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

}  // namespace

TokenizerPreset parse_tokenizer_preset(const std::string& name) {
  if (name == "k3") return TokenizerPreset::kK3;
  if (name == "cl100k" || name == "cl100k_base") return TokenizerPreset::kCl100k;
  if (name == "o200k" || name == "o200k_base") return TokenizerPreset::kO200k;
  fail("unknown tokenizer pattern '", name, "' (expected k3, cl100k or o200k)");
}

const std::string& preset_pattern(TokenizerPreset preset) {
  switch (preset) {
    case TokenizerPreset::kCl100k: return kCl100kPattern;
    case TokenizerPreset::kO200k: return kO200kPattern;
    case TokenizerPreset::kK3: break;
  }
  return kK3Pattern;
}

SpecialTokens preset_specials(TokenizerPreset preset, int32_t end_rank) {
  switch (preset) {
    case TokenizerPreset::kCl100k:
      return SpecialTokens({{"<|endoftext|>", 100257},
                            {"<|fim_prefix|>", 100258},
                            {"<|fim_middle|>", 100259},
                            {"<|fim_suffix|>", 100260},
                            {"<|endofprompt|>", 100276}},
                           "cl100k specials");
    case TokenizerPreset::kO200k:
      return SpecialTokens({{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}, "o200k specials");
    case TokenizerPreset::kK3: break;
  }
  return SpecialTokens::k3_defaults(end_rank);
}

bool preset_uses_kimi_chunking(TokenizerPreset preset) { return preset == TokenizerPreset::kK3; }

}  // namespace k3
