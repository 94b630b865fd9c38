// A plain recursive check of the JSON Schema subset that text/json_schema.h compiles, on
// nlohmann's parse: the reference the incremental SchemaValidator and the constraints built on
// it are tested against (written independently of them).
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace k3::testing {

// The reference: does `v` satisfy schema `s` (the supported subset, with k3's stricter integer
// and only the listed properties)?
inline bool satisfies(const nlohmann::json& v, const nlohmann::json& s, const nlohmann::json& root) {
  using json = nlohmann::json;
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"];
    return satisfies(v, root["$defs"][ref.substr(std::string("#/$defs/").size())], root);
  }
  if (s.contains("anyOf") || s.contains("oneOf")) {
    const json& alts = s.contains("anyOf") ? s["anyOf"] : s["oneOf"];
    int matches = 0;
    for (const json& a : alts) matches += satisfies(v, a, root) ? 1 : 0;
    return s.contains("anyOf") ? matches > 0 : matches == 1;
  }
  if (s.contains("enum")) {
    for (const json& e : s["enum"])
      if (e == v && e.type() == v.type()) return true;
    return false;
  }
  if (s.contains("type")) {
    std::set<std::string> types;
    if (s["type"].is_string()) types.insert(s["type"].get<std::string>());
    else for (const json& t : s["type"]) types.insert(t.get<std::string>());
    const bool is_int = v.is_number_integer();
    const bool ok = (types.count("object") && v.is_object()) || (types.count("array") && v.is_array()) ||
                    (types.count("string") && v.is_string()) || (types.count("number") && v.is_number()) ||
                    (types.count("integer") && is_int) || (types.count("boolean") && v.is_boolean()) ||
                    (types.count("null") && v.is_null());
    if (!ok) return false;
  }
  if (v.is_object() && s.contains("properties")) {
    for (const auto& [k, x] : v.items()) {
      if (!s["properties"].contains(k)) return false;
      if (!satisfies(x, s["properties"][k], root)) return false;
    }
    if (s.contains("required"))
      for (const json& r : s["required"])
        if (!v.contains(r.get<std::string>())) return false;
  }
  if (v.is_array() && s.contains("items")) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    for (const json& x : v)
      if (!satisfies(x, s["items"], root)) return false;
  }
  return true;
}

}  // namespace k3::testing
