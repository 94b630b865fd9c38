#include "text/json_validator.h"

namespace k3 {
namespace {

bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

constexpr std::string_view kLiterals[3] = {"true", "false", "null"};

}  // namespace

bool JsonValidator::whitespace() { return ++ws_run_ <= kMaxWhitespaceRun; }

bool JsonValidator::after_value() {
  mode_ = depth_ == 0 ? Mode::kDone : Mode::kAfter;
  return true;
}

bool JsonValidator::start_value(uint8_t c) {
  switch (c) {
    case '{':
    case '[':
      if (depth_ >= kMaxDepth) return false;
      stack_[depth_++] = c;
      mode_ = c == '{' ? Mode::kObjFirst : Mode::kArrFirst;
      return true;
    case '"':
      mode_ = Mode::kString;
      key_ = false;
      return true;
    case '-':
      mode_ = Mode::kNumber;
      num_ = Num::kMinus;
      return true;
    case 't':
    case 'f':
    case 'n':
      mode_ = Mode::kLiteral;
      lit_ = c == 't' ? 0 : c == 'f' ? 1 : 2;
      lit_pos_ = 1;
      return true;
    default:
      if (!is_digit(c)) return false;
      mode_ = Mode::kNumber;
      num_ = c == '0' ? Num::kZero : Num::kInt;
      return true;
  }
}

bool JsonValidator::structural(uint8_t c) {
  if (JsonValidator::is_ws(c)) return whitespace();
  ws_run_ = 0;
  const uint8_t top = depth_ > 0 ? stack_[depth_ - 1] : 0;
  switch (mode_) {
    case Mode::kStart:
      if (object_only_ && c != '{') return false;
      return start_value(c);
    case Mode::kValue:
      return start_value(c);
    case Mode::kObjFirst:
    case Mode::kObjKey:
      if (c == '"') {
        mode_ = Mode::kString;
        key_ = true;
        return true;
      }
      if (c == '}' && mode_ == Mode::kObjFirst) {
        --depth_;
        return after_value();
      }
      return false;
    case Mode::kColon:
      if (c != ':') return false;
      mode_ = Mode::kValue;
      return true;
    case Mode::kArrFirst:
      if (c == ']') {
        --depth_;
        return after_value();
      }
      return start_value(c);
    case Mode::kAfter:
      if (c == ',') {
        mode_ = top == '{' ? Mode::kObjKey : Mode::kValue;
        return true;
      }
      if ((c == '}' && top == '{') || (c == ']' && top == '[')) {
        --depth_;
        return after_value();
      }
      return false;
    default:
      return false;  // kDone: only whitespace
  }
}

bool JsonValidator::string_byte(uint8_t c) {
  if (utf8_left_ > 0) {
    if (c < utf8_lo_ || c > utf8_hi_) return false;
    --utf8_left_;
    utf8_lo_ = 0x80;
    utf8_hi_ = 0xBF;
    return true;
  }
  if (escape_ == 1) {  // after a backslash
    if (c == 'u') {
      escape_ = 5;  // four hex digits to come: 5, 4, 3, 2
      return true;
    }
    escape_ = 0;
    return c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't';
  }
  if (escape_ > 1) {
    if (!is_hex(c)) return false;
    escape_ = escape_ == 2 ? 0 : escape_ - 1;
    return true;
  }
  if (c == '"') {
    if (key_) {
      key_ = false;
      mode_ = Mode::kColon;
      return true;
    }
    return after_value();
  }
  if (c == '\\') {
    escape_ = 1;
    return true;
  }
  if (c < 0x20) return false;
  if (c < 0x80) return true;
  // UTF-8 lead bytes, with the range of the first continuation byte (RFC 3629's table).
  if (c >= 0xC2 && c <= 0xDF) {
    utf8_left_ = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    utf8_left_ = 2;
    if (c == 0xE0) utf8_lo_ = 0xA0;
    if (c == 0xED) utf8_hi_ = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    utf8_left_ = 3;
    if (c == 0xF0) utf8_lo_ = 0x90;
    if (c == 0xF4) utf8_hi_ = 0x8F;  // nothing above U+10FFFF
  } else {
    return false;
  }
  return true;
}

bool JsonValidator::feed(uint8_t c) {
  switch (mode_) {
    case Mode::kString:
      return string_byte(c);
    case Mode::kLiteral: {
      const std::string_view lit = kLiterals[lit_];
      if (c != static_cast<uint8_t>(lit[lit_pos_])) return false;
      if (++lit_pos_ == lit.size()) return after_value();
      return true;
    }
    case Mode::kNumber:
      switch (num_) {
        case Num::kMinus:
          if (!is_digit(c)) return false;
          num_ = c == '0' ? Num::kZero : Num::kInt;
          return true;
        case Num::kDot:
          if (!is_digit(c)) return false;
          num_ = Num::kFrac;
          return true;
        case Num::kE:
          if (c == '+' || c == '-') {
            num_ = Num::kESign;
            return true;
          }
          if (!is_digit(c)) return false;
          num_ = Num::kExp;
          return true;
        case Num::kESign:
          if (!is_digit(c)) return false;
          num_ = Num::kExp;
          return true;
        case Num::kInt:
        case Num::kFrac:
        case Num::kExp:
          if (is_digit(c)) return true;
          [[fallthrough]];
        case Num::kZero:
          if ((num_ == Num::kZero || num_ == Num::kInt) && c == '.') {
            num_ = Num::kDot;
            return true;
          }
          if (num_ != Num::kExp && (c == 'e' || c == 'E')) {
            num_ = Num::kE;
            return true;
          }
          // The number ended; c is the next token's first byte.
          after_value();
          return structural(c);
      }
      return false;
    default:
      return structural(c);
  }
}

}  // namespace k3
