// Splits text into the pieces BPE works on, with a tiktoken-style pre-tokenization regex run by
// PCRE2 (UTF + Unicode properties, JIT-compiled when the platform supports it).  The pattern is
// given in tiktoken's own syntax and translated (see regex_translate.h).
//
// Matching is tiktoken's find_iter: leftmost-first alternation, successive non-overlapping matches;
// text that no alternative matches is skipped (none of the shipped patterns leaves any).  The text
// must be well-formed UTF-8 (Tokenizer sanitizes first); it is not re-validated per match, which
// would make long inputs quadratic.  Thread-safe: per-thread match data and JIT stack.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;

namespace k3 {

class Pretokenizer {
 public:
  // Throws k3::Error if the pattern does not translate or compile.
  explicit Pretokenizer(const std::string& pattern);

  const std::string& pattern() const { return pattern_; }
  const std::string& pcre2_pattern() const { return pcre2_pattern_; }

  // Calls f(piece) for every match, in order.
  template <typename F>
  void for_each_piece(std::string_view text, F&& f) const {
    size_t pos = 0, begin = 0, end = 0;
    while (pos < text.size() && next_match(text, pos, begin, end)) {
      if (end > begin) {
        f(text.substr(begin, end - begin));
        pos = end;
      } else {
        pos = begin + 1;  // empty match: step over one character
        while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      }
    }
  }

  // All pieces; throws k3::Error if text is not valid UTF-8.
  std::vector<std::string> split(std::string_view text) const;

 private:
  // The first match at or after `from`; false when there is none.
  bool next_match(std::string_view text, size_t from, size_t& begin, size_t& end) const;

  std::string pattern_;
  std::string pcre2_pattern_;
  std::shared_ptr<pcre2_real_code_8> code_;
  bool jit_ = false;
};

}  // namespace k3
