// Translates a pre-tokenization regex written for tiktoken (Rust regex / fancy-regex syntax, as
// shipped in tokenizer files and the fixtures) into an equivalent PCRE2 pattern:
//   - `[X&&[^Y]]` class intersection (PCRE2 has none) becomes `(?:(?![Y])[X])`, `[X&&[Y]]` becomes
//     `(?:(?=[Y])[X])`;
//   - `\s` / `\S` become explicit Unicode White_Space classes (PCRE2's UCP `\s` also matches
//     U+180E, which White_Space does not contain);
//   - script properties such as `\p{Han}` become `\p{sc:Han}`: PCRE2 >= 10.40 reads a bare script
//     name as Script_Extensions, while tiktoken and Python `regex` use Script (so U+3001 "、" is
//     not Han).  One- and two-letter names (general categories like `L`, `Lu`, `N`) are kept.
// Everything else is copied unchanged.  Throws k3::Error on syntax it cannot translate faithfully.
#pragma once

#include <string>
#include <string_view>

namespace k3 {

std::string tiktoken_regex_to_pcre2(std::string_view pattern);

}  // namespace k3
