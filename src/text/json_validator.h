// An incremental, byte-at-a-time JSON (RFC 8259) recogniser: feed() says whether a byte can
// continue a text that is still the prefix of some valid JSON document, complete() whether a
// whole document has been read.  It is what constrained decoding (response_format json_object)
// runs every candidate token's bytes through, so its state is a small copyable value: a caller
// copies it, tries bytes, and keeps or drops the copy.
//
// Checked: structure (objects, arrays, ':' and ',' placement, no trailing commas), strings (no
// raw control characters, valid escapes, \u with 4 hex digits, well-formed UTF-8: no overlong
// forms, surrogates or code points above U+10FFFF), numbers (JSON's grammar: no leading zeros,
// digits after '.' and 'e'; and, as nlohmann::json::accept, nothing that overflows a double:
// a number whose integer digits and exponent put it at 10^308 or above is refused, a
// conservative bound that also refuses e.g. 0e308), the literals true / false / null, and
// nesting up to kMaxDepth.
// Escapes of UTF-16 surrogates must pair (\uD83D\uDE00): a lone one is refused, as nlohmann's
// parser refuses it.  Not checked: duplicate keys (valid JSON text).
//
// Two limits keep a constrained generation from running away: whitespace outside strings comes
// in runs of at most kMaxWhitespaceRun bytes, and with object_only the document must be an object.
#pragma once

#include <cstdint>
#include <string_view>

#include "text/utf8.h"

namespace k3 {

// r.feed(c) for each byte of `bytes`, stopping at the first refusal (JsonValidator,
// SchemaValidator).
template <class R>
bool feed_each(R& r, std::string_view bytes) {
  for (char c : bytes)
    if (!r.feed(static_cast<uint8_t>(c))) return false;
  return true;
}

class JsonValidator {
 public:
  static constexpr int kMaxDepth = 32;
  static constexpr int kMaxWhitespaceRun = 8;
  static constexpr int kMaxDecimalExponent = 307;  // numbers stay below 10^(this + 1)

  explicit JsonValidator(bool object_only = false) : object_only_(object_only) {}
  // JSON's four whitespace bytes.
  static bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

  // Consumes c when it keeps the text a valid JSON prefix; otherwise returns false and the state
  // is no longer meaningful (callers try bytes on a copy).
  bool feed(uint8_t c);
  bool feed(std::string_view bytes) { return feed_each(*this, bytes); }
  // A whole document has been read (only whitespace may follow).
  bool complete() const { return mode_ == Mode::kDone; }
  // complete(), or a top-level number that the end of the text would finish ("12").
  bool complete_at_end() const {
    return complete() || (mode_ == Mode::kNumber && depth_ == 0 &&
                          (num_ == Num::kZero || num_ == Num::kInt || num_ == Num::kFrac || num_ == Num::kExp));
  }
  int depth() const { return depth_; }

 private:
  enum class Mode : uint8_t {
    kStart,      // before the document
    kValue,      // a value must come (after ':' or ',' in an array)
    kObjFirst,   // after '{': a key or '}'
    kObjKey,     // after ',' in an object: a key
    kColon,      // after a key
    kArrFirst,   // after '[': a value or ']'
    kAfter,      // after a value inside a container: ',' or the closer
    kString,     // inside a string (key_ says whether it is a key)
    kNumber,
    kLiteral,
    kDone,
  };
  enum class Num : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kE, kESign, kExp };

  bool start_value(uint8_t c);
  bool after_value();  // a value just ended: where the parser goes next
  bool structural(uint8_t c);
  bool string_byte(uint8_t c);
  bool number_byte(uint8_t c);
  bool exp_digit(uint8_t c);  // one more exponent digit: false once the number could overflow
  bool whitespace();

  bool object_only_;
  Mode mode_ = Mode::kStart;
  bool key_ = false;       // the current string is an object key
  Num num_ = Num::kMinus;  // number sub-state
  int16_t int_digits_ = 0;  // number: digits before '.' (capped by the refusal)
  int16_t exp_ = 0;         // number: the exponent's magnitude so far (capped at 10000)
  bool exp_neg_ = false;
  uint8_t lit_ = 0;        // literal: which one (0 true, 1 false, 2 null) ...
  uint8_t lit_pos_ = 0;    // ... and how many of its bytes were read
  uint8_t escape_ = 0;     // string: 1 after '\', 2..5 = hex digits of \u still to come + 1
  bool low_next_ = false;  // string: a high surrogate's \u escape ended; a low one must follow
  uint16_t unit_ = 0;      // string: the hex digits of the current \u escape so far
  utf8::Checker utf8_;     // string: UTF-8 well-formedness
  uint8_t ws_run_ = 0;
  int depth_ = 0;
  uint8_t stack_[kMaxDepth] = {};  // '{' or '['
};

}  // namespace k3
