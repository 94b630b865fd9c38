// UTF-8 helpers shared by the tokenizer, the stream decoder and the chat code.
//
// Invalid input is never rejected here: `sanitize` replaces every ill-formed sequence by U+FFFD the
// way Python's bytes.decode("utf-8", errors="replace") does (one U+FFFD per "maximal subpart", the
// Unicode/W3C recommended practice), so k3's tokenizer always works on well-formed text.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace k3::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

enum class Scan { kValid, kInvalid, kTruncated };

// Looks at the sequence starting at s[i] (i < s.size()).  Returns its length in bytes and sets
// `result`: kValid (a complete well-formed character), kInvalid (the maximal ill-formed subpart,
// at least 1 byte), or kTruncated (a well-formed prefix cut off by the end of s).
size_t scan(std::string_view s, size_t i, Scan& result);

bool is_valid(std::string_view s);

// s with every ill-formed subpart (including a truncated one at the end) replaced by U+FFFD.
std::string sanitize(std::string_view s);

// How many bytes at the end of s form a well-formed but unfinished character (0..3).
size_t truncated_tail(std::string_view s);

// Decodes the character at s[i] (i < s.size()) and advances i past it; an ill-formed subpart
// reads as U+FFFD.
char32_t next(std::string_view s, size_t& i);

// Python's str.isspace() (Unicode White_Space plus U+001C..U+001F).
bool is_python_space(char32_t cp);
// True when s is empty or all is_python_space (Python: not s.strip()).
bool is_blank(std::string_view s);

}  // namespace k3::utf8
