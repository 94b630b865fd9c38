#include "text/py_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <vector>

namespace k3 {
namespace {

void dump_string(const std::string& s, std::string& out) {
  out += '"';
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void dump(const ojson& v, const PyJsonStyle& style, std::string& out) {
  switch (v.type()) {
    case ojson::value_t::null: out += "null"; return;
    case ojson::value_t::boolean: out += v.get<bool>() ? "true" : "false"; return;
    case ojson::value_t::number_integer: out += std::to_string(v.get<int64_t>()); return;
    case ojson::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); return;
    case ojson::value_t::number_float: out += py_float_repr(v.get<double>()); return;
    case ojson::value_t::string: dump_string(v.get_ref<const std::string&>(), out); return;
    case ojson::value_t::array: {
      out += '[';
      bool first = true;
      for (const ojson& e : v) {
        if (!first) out += style.item_separator;
        first = false;
        dump(e, style, out);
      }
      out += ']';
      return;
    }
    case ojson::value_t::object: {
      std::vector<std::pair<const std::string*, const ojson*>> items;
      for (auto it = v.begin(); it != v.end(); ++it) items.emplace_back(&it.key(), &it.value());
      if (style.sort_keys)
        std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return *a.first < *b.first; });
      out += '{';
      bool first = true;
      for (const auto& [key, value] : items) {
        if (!first) out += style.item_separator;
        first = false;
        dump_string(*key, out);
        out += style.key_separator;
        dump(*value, style, out);
      }
      out += '}';
      return;
    }
    case ojson::value_t::binary:
    case ojson::value_t::discarded: out += "null"; return;
  }
}

}  // namespace

std::string py_float_repr(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  if (value == 0.0) return std::signbit(value) ? "-0.0" : "0.0";
  // Shortest round-trip digits, in scientific form: [-]d[.ddd]e[+-]x
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(sci.substr(e + 1));
  const int decpt = exponent + 1;  // position of the decimal point relative to the digits
  const int n = static_cast<int>(digits.size());
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= n) {
      out += digits + std::string(decpt - n, '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  char exp[16];
  std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp;
}

std::string py_json_dumps(const ojson& value, const PyJsonStyle& style) {
  std::string out;
  dump(value, style, out);
  return out;
}

bool json_nests_deeper_than(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

std::optional<ojson> py_json_loads(std::string_view text) {
  if (json_nests_deeper_than(text)) return std::nullopt;
  ojson v = ojson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return std::nullopt;
  return v;
}

}  // namespace k3
