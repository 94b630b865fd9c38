// UTF-8 helpers shared by the tokenizer, the stream decoder and the chat code.
//
// Invalid input is never rejected here: `sanitize` replaces every ill-formed sequence by U+FFFD the
// way Python's bytes.decode("utf-8", errors="replace") does (one U+FFFD per "maximal subpart", the
// Unicode/W3C recommended practice), so k3's tokenizer always works on well-formed text.
#pragma once

#include <cstddef>
#include <cstdint>
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

// A byte-at-a-time well-formedness check (RFC 3629: no overlong forms, surrogates or code
// points above U+10FFFF), a small copyable value for constrained decoding.
class Checker {
 public:
  // false: c cannot continue well-formed UTF-8 (the state is then unspecified).
  bool feed(uint8_t c) {
    if (left_ > 0) {
      if (c < lo_ || c > hi_) return false;
      --left_;
      lo_ = 0x80;
      hi_ = 0xBF;
      return true;
    }
    if (c < 0x80) return true;
    // Lead bytes, with the range of the first continuation byte.
    if (c >= 0xC2 && c <= 0xDF) {
      left_ = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      left_ = 2;
      if (c == 0xE0) lo_ = 0xA0;
      if (c == 0xED) hi_ = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      left_ = 3;
      if (c == 0xF0) lo_ = 0x90;
      if (c == 0xF4) hi_ = 0x8F;  // nothing above U+10FFFF
    } else {
      return false;
    }
    return true;
  }
  bool feed(std::string_view b) {
    for (char c : b)
      if (!feed(static_cast<uint8_t>(c))) return false;
    return true;
  }
  // No character is half-way.
  bool complete() const { return left_ == 0; }

 private:
  uint8_t left_ = 0;  // continuation bytes still to come
  uint8_t lo_ = 0x80, hi_ = 0xBF;  // the range the next continuation byte must be in
};

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
