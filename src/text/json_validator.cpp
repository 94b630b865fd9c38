#include "text/json_validator.h"

#include <algorithm>

namespace k3 {
namespace {

bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
uint16_t hex_value(uint8_t c) { return is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10; }

// UTF-16 surrogates, as \u escapes write the code points above U+FFFF.
constexpr uint16_t kHighFirst = 0xD800, kLowFirst = 0xDC00, kLowLast = 0xDFFF;

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
      int_digits_ = 1;
      exp_ = 0;
      exp_neg_ = false;
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
  if (!utf8_.complete()) return utf8_.feed(c);
  if (escape_ == 1) {  // after a backslash
    if (c == 'u') {
      escape_ = 5;  // four hex digits to come: 5, 4, 3, 2
      unit_ = 0;
      return true;
    }
    if (low_next_) return false;  // only \u of a low surrogate may follow a high one
    escape_ = 0;
    return c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't';
  }
  if (escape_ > 1) {
    if (!is_hex(c)) return false;
    unit_ = static_cast<uint16_t>(unit_ << 4 | hex_value(c));
    escape_ = escape_ == 2 ? 0 : escape_ - 1;
    // The escapes of UTF-16 surrogates must pair, a high one (D800-DBFF) and then at once a low
    // one (DC00-DFFF): nlohmann's parser, which reads the text back (tool-call arguments, tests),
    // refuses a lone one.  Refused at the first hex digit that rules every pairing out, so that
    // every accepted prefix still has a valid continuation.
    const int shift = escape_ == 0 ? 0 : 4 * (escape_ - 1);  // bits of the digits still to come
    const uint32_t lo = uint32_t{unit_} << shift, hi = lo | ((1u << shift) - 1);
    const bool can_be_low = hi >= kLowFirst && lo <= kLowLast;
    const bool can_be_other = lo < kLowFirst || hi > kLowLast;
    if (!(low_next_ ? can_be_low : can_be_other)) return false;
    if (escape_ == 0) low_next_ = !low_next_ && unit_ >= kHighFirst && unit_ < kLowFirst;
    return true;
  }
  if (low_next_) {  // a high surrogate's escape: its low one must follow
    if (c != '\\') return false;
    escape_ = 1;
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
  return utf8_.feed(c);
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
          int_digits_ = 1;
          exp_ = 0;
          exp_neg_ = false;
          return true;
        case Num::kDot:
          if (!is_digit(c)) return false;
          num_ = Num::kFrac;
          return true;
        case Num::kE:
          if (c == '+' || c == '-') {
            num_ = Num::kESign;
            exp_neg_ = c == '-';
            return true;
          }
          if (!is_digit(c)) return false;
          num_ = Num::kExp;
          return exp_digit(c);
        case Num::kESign:
          if (!is_digit(c)) return false;
          num_ = Num::kExp;
          return exp_digit(c);
        case Num::kInt:
          if (is_digit(c)) return ++int_digits_ - 1 <= kMaxDecimalExponent;
          [[fallthrough]];
        case Num::kFrac:
        case Num::kExp:
          if (is_digit(c)) return num_ == Num::kExp ? exp_digit(c) : true;
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

bool JsonValidator::exp_digit(uint8_t c) {
  exp_ = static_cast<int16_t>(std::min(exp_ * 10 + (c - '0'), 10000));
  return exp_neg_ || int_digits_ - 1 + exp_ <= kMaxDecimalExponent;
}

}  // namespace k3
