// The pre-tokenization patterns k3 knows, each with the special tokens that go with it:
//   k3      the Kimi K2/K3 pre-tokenization regex; specials = K3's 256 reserved ids right
//           after the ordinary ranks; encodes with the reference's chunking
//           (400,000-char windows, runs of at most 25,000 (non-)whitespace chars);
//   cl100k  OpenAI cl100k_base; specials <|endoftext|> 100257, <|fim_prefix|> 100258,
//           <|fim_middle|> 100259, <|fim_suffix|> 100260, <|endofprompt|> 100276;
//   o200k   OpenAI o200k_base; specials <|endoftext|> 199999, <|endofprompt|> 200018.
// The pattern strings are exactly those of tests/data/fixtures/tokenizer/*_pattern.txt (the npm
// tiktoken package's, and the Kimi reference's).
#pragma once

#include <string>

#include "text/special_tokens.h"

namespace k3 {

enum class TokenizerPreset { kK3, kCl100k, kO200k };

// "k3", "cl100k" / "cl100k_base", "o200k" / "o200k_base"; throws k3::Error naming the value.
TokenizerPreset parse_tokenizer_preset(const std::string& name);
const std::string& preset_pattern(TokenizerPreset preset);
// The preset's specials for a vocabulary whose ordinary ranks end at `end_rank`.
SpecialTokens preset_specials(TokenizerPreset preset, int32_t end_rank);
bool preset_uses_kimi_chunking(TokenizerPreset preset);

}  // namespace k3
