#include "text/regex_translate.h"

#include "base/error.h"

namespace k3 {
namespace {

// Unicode White_Space, as class items.
constexpr std::string_view kSpaceItems =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

class Translator {
 public:
  explicit Translator(std::string_view p) : p_(p) {}

  std::string run() {
    std::string out;
    while (i_ < p_.size()) {
      const char c = p_[i_];
      if (c == '\\') {
        out += escape(/*in_class=*/false);
      } else if (c == '[') {
        out += char_class();
      } else {
        out += c;
        ++i_;
      }
    }
    return out;
  }

 private:
  [[noreturn]] void bad(const std::string& why) const {
    fail("pre-tokenization regex: ", why, " at offset ", i_, " of '", std::string(p_), "'");
  }

  // At a backslash; returns the PCRE2 text of the escape.
  std::string escape(bool in_class) {
    if (i_ + 1 >= p_.size()) bad("dangling backslash");
    const char e = p_[i_ + 1];
    if (e == 's') {
      i_ += 2;
      return in_class ? std::string(kSpaceItems) : "[" + std::string(kSpaceItems) + "]";
    }
    if (e == 'S') {
      if (in_class) bad("\\S inside a character class is not supported");
      i_ += 2;
      return "[^" + std::string(kSpaceItems) + "]";
    }
    if ((e == 'p' || e == 'P') && i_ + 2 < p_.size() && p_[i_ + 2] == '{') {
      const size_t close = p_.find('}', i_ + 3);
      if (close == std::string_view::npos) bad("unterminated \\p{...}");
      std::string name(p_.substr(i_ + 3, close - i_ - 3));
      i_ = close + 1;
      const bool script = name.size() > 2 && name.find(':') == std::string::npos && name.find('=') == std::string::npos;
      return std::string("\\") + e + "{" + (script ? "sc:" : "") + name + "}";
    }
    // Any other escape: the backslash and one character (a \x{...} form is copied on the way).
    std::string out(p_.substr(i_, 2));
    i_ += 2;
    return out;
  }

  // At '['; returns the PCRE2 text of the whole class (which may become a group).
  std::string char_class() {
    ++i_;  // '['
    bool negated = false;
    if (i_ < p_.size() && p_[i_] == '^') {
      negated = true;
      ++i_;
    }
    std::string items;
    while (true) {
      if (i_ >= p_.size()) bad("unterminated character class");
      const char c = p_[i_];
      if (c == ']' && !items.empty()) {
        ++i_;
        return std::string("[") + (negated ? "^" : "") + items + "]";
      }
      if (c == '&' && i_ + 1 < p_.size() && p_[i_ + 1] == '&') {
        if (negated) bad("a negated class with && is not supported");
        i_ += 2;
        if (i_ >= p_.size() || p_[i_] != '[') bad("&& must be followed by a nested class");
        const bool rhs_negated = i_ + 1 < p_.size() && p_[i_ + 1] == '^';
        std::string rhs = char_class();  // "[^Y]" or "[Y]"
        if (i_ >= p_.size() || p_[i_] != ']') bad("&& must end its class");
        ++i_;
        if (rhs_negated) rhs.erase(1, 1);
        return std::string("(?:(?") + (rhs_negated ? "!" : "=") + rhs + ")[" + items + "])";
      }
      if (c == '[') bad("nested character classes are only supported after &&");
      if (c == '\\') {
        items += escape(/*in_class=*/true);
      } else {
        items += c;
        ++i_;
      }
    }
  }

  std::string_view p_;
  size_t i_ = 0;
};

}  // namespace

std::string tiktoken_regex_to_pcre2(std::string_view pattern) { return Translator(pattern).run(); }

}  // namespace k3
