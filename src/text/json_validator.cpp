#include "text/json_validator.h"

#include <algorithm>

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
