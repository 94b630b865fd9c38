#include "text/py_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <unordered_map>
#include <vector>

#include "base/error.h"

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

// Builds an ordered_json from nlohmann's SAX events in linear time.  ojson::parse inserts each key
// with ordered_map's linear search, so an object of n keys takes O(n^2): seconds for a body of
// tens of thousands of keys.  Here a key is appended directly, and a hash map per open object
// (key -> position) finds a repeated one, which keeps its first position and takes the last
// value (as a Python dict).
class OrderedBuilder {
 public:
  using Sax = nlohmann::json_sax<nlohmann::json>;
  ojson root;
  std::string error;

  bool null() { return value(nullptr); }
  bool boolean(bool v) { return value(v); }
  bool number_integer(Sax::number_integer_t v) { return value(v); }
  bool number_unsigned(Sax::number_unsigned_t v) { return value(v); }
  bool number_float(Sax::number_float_t v, const Sax::string_t&) { return value(v); }
  bool string(Sax::string_t& v) { return value(std::move(v)); }
  bool binary(Sax::binary_t&) { return value(nullptr); }  // (JSON text has none)
  bool start_object(size_t) {
    value(ojson::object_t());
    open_.push_back(last_);
    keys_.emplace_back();
    return true;
  }
  bool key(Sax::string_t& k) {
    ojson::object_t& obj = open_.back()->get_ref<ojson::object_t&>();
    const auto [it, added] = keys_.back().emplace(k, obj.size());
    if (added) static_cast<ojson::object_t::Container&>(obj).emplace_back(std::move(k), nullptr);
    slot_ = &static_cast<ojson::object_t::Container&>(obj)[it->second].second;
    return true;
  }
  bool end_object() {
    open_.pop_back();
    keys_.pop_back();
    return true;
  }
  bool start_array(size_t) {
    value(ojson::array_t());
    open_.push_back(last_);
    keys_.emplace_back();
    return true;
  }
  bool end_array() { return end_object(); }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& e) {
    error = e.what();
    return false;
  }

 private:
  // Places v where the next value goes; last_ points at it.
  template <typename V>
  bool value(V&& v) {
    if (open_.empty()) {
      root = ojson(std::forward<V>(v));
      last_ = &root;
    } else if (open_.back()->is_array()) {
      open_.back()->push_back(ojson(std::forward<V>(v)));
      last_ = &open_.back()->back();
    } else {
      *slot_ = ojson(std::forward<V>(v));
      last_ = slot_;
    }
    return true;
  }

  std::vector<ojson*> open_;  // the containers being filled (a parent does not grow meanwhile)
  std::vector<std::unordered_map<std::string, size_t>> keys_;  // per open container: key -> position
  ojson* slot_ = nullptr;     // the value of the latest key
  ojson* last_ = nullptr;
};

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

ojson py_json_parse(std::string_view text) {
  // nlohmann's parser takes a NUL byte for the end of the input: "{\"a\": 1}\0{\"b\": 2}" read as
  // {"a": 1}, the rest silently gone.  A NUL is never part of JSON text (in a string it is \u0000).
  const size_t nul = text.find('\0');
  K3_CHECK(nul == std::string_view::npos, "contains a NUL byte at offset ", nul);
  OrderedBuilder builder;
  nlohmann::json::sax_parse(text.begin(), text.end(), &builder);
  K3_CHECK(builder.error.empty(), builder.error);
  return std::move(builder.root);
}

std::optional<ojson> py_json_loads(std::string_view text) {
  if (json_nests_deeper_than(text)) return std::nullopt;
  try {
    return py_json_parse(text);
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace k3
