// JSON text exactly as Python's json module writes it, for the places where the K3 chat format
// bakes Python output into the prompt (tool declarations, argument values) or into the API
// response (tool-call `arguments`):
//   - json.dumps(v, ensure_ascii=False[, separators=...][, sort_keys=...]): only `"`, `\`, and
//     control characters below U+0020 are escaped (\n \r \t \b \f, else \u00XX); keys keep their
//     insertion order unless sorted (by code point, at every level);
//   - floats as Python's repr: shortest round-trip digits, fixed notation when the decimal exponent
//     is in (-4, 16], else d.ddde±XX; always with a '.' or an exponent (1.0, 100000.0, 1e+16,
//     1.5e-07, -0.0); NaN / Infinity / -Infinity as Python writes them.
// loads() is nlohmann's parser with insertion order kept and a repeated key keeping its first
// position with the last value (as a Python dict does).  Known differences from Python's
// json.loads: NaN/Infinity literals are rejected, and integers beyond 64 bits become floats.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace k3 {

using ojson = nlohmann::ordered_json;

struct PyJsonStyle {
  std::string_view item_separator = ", ";
  std::string_view key_separator = ": ";
  bool sort_keys = false;
};

inline constexpr PyJsonStyle kPyJsonDefault{", ", ": ", false};
inline constexpr PyJsonStyle kPyJsonCompactSorted{",", ":", true};

std::string py_json_dumps(const ojson& value, const PyJsonStyle& style = kPyJsonDefault);
std::string py_float_repr(double value);
// One JSON value, keys in their order (a repeated key as in loads() below), in linear time
// (ojson::parse searches each object linearly per key: quadratic).  Throws k3::Error with the
// parser's message for invalid JSON, and for a NUL byte anywhere (nlohmann's parser stops there as
// at the end of the input, silently dropping the rest).  Callers bound the nesting first
// (json_nests_deeper_than).
ojson py_json_parse(std::string_view text);
// nullopt when `text` is not one JSON value (a NUL byte anywhere included), or nests deeper than
// kMaxJsonDepth.
std::optional<ojson> py_json_loads(std::string_view text);

// The deepest nesting of arrays and objects k3 accepts in JSON from a request or from model
// output.  Everything downstream (the Python-style dump above, the schema compiler, the chat
// renderer) recurses once per level, so a 100 KB body of nested '[' would otherwise overflow the
// stack; no real tool schema, argument or request comes near this.
inline constexpr int kMaxJsonDepth = 256;
// Whether `text` nests arrays / objects deeper than max_depth: a scan that skips string
// contents (escapes included) and stops at the first level past the limit; it does not check
// that the text is valid JSON (the parser does that).
bool json_nests_deeper_than(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace k3
