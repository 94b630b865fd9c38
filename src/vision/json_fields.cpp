#include "vision/json_fields.h"

#include "base/error.h"

namespace k3 {

const nlohmann::json* JsonFields::find(const std::string& key) {
  if (!obj_.is_object()) return nullptr;
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

void JsonFields::problem(const std::string& key, const std::string& what) {
  problems_.push_back(cat(path_, key, ": ", what));
}

// The value of `key` as T when `valid` accepts it; otherwise records a problem ("missing (<what>
// is required)" or "must be <what>, got ...") and returns the fallback (or `none`).
template <typename T, typename Valid>
T JsonFields::typed(const std::string& key, const std::optional<T>& fallback, const T& none, const std::string& what,
                    Valid valid) {
  const nlohmann::json* v = find(key);
  if (v == nullptr) {
    if (!fallback) problem(key, cat("missing (", what, " is required)"));
    return fallback.value_or(none);
  }
  if (!valid(*v)) {
    problem(key, cat("must be ", what, ", got ", v->dump()));
    return fallback.value_or(none);
  }
  return v->get<T>();
}

int JsonFields::integer(const std::string& key, std::optional<int> fallback, int min, int max) {
  return typed<int>(key, fallback, min, cat("an integer in [", min, ", ", max, "]"), [&](const nlohmann::json& v) {
    return v.is_number_integer() && v.get<int64_t>() >= min && v.get<int64_t>() <= max;
  });
}

double JsonFields::number(const std::string& key, std::optional<double> fallback, double min, double max) {
  return typed<double>(key, fallback, min, cat("a number in [", min, ", ", max, "]"), [&](const nlohmann::json& v) {
    return v.is_number() && v.get<double>() >= min && v.get<double>() <= max;
  });
}

bool JsonFields::boolean(const std::string& key, std::optional<bool> fallback) {
  return typed<bool>(key, fallback, false, "true or false", [](const nlohmann::json& v) { return v.is_boolean(); });
}

std::string JsonFields::string(const std::string& key, std::optional<std::string> fallback) {
  return typed<std::string>(key, fallback, "", "a string", [](const nlohmann::json& v) { return v.is_string(); });
}

std::string JsonFields::choice(const std::string& key, const std::vector<std::string>& allowed,
                               std::optional<std::string> fallback) {
  const size_t before = problems_.size();
  std::string s = string(key, fallback);
  if (problems_.size() != before) return s;
  for (const std::string& a : allowed)
    if (s == a) return s;
  std::string list;
  for (const std::string& a : allowed) list += (list.empty() ? "'" : ", '") + a + "'";
  problem(key, cat("'", s, "' is not supported (k3 implements ", list, ")"));
  return s;
}

std::vector<double> JsonFields::numbers(const std::string& key, std::vector<double> fallback, size_t size) {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return fallback;
  bool ok = v->is_array() && v->size() == size;
  if (ok)
    for (const auto& x : *v) ok = ok && x.is_number();
  if (!ok) {
    problem(key, cat("must be an array of ", size, " numbers, got ", v->dump()));
    return fallback;
  }
  std::vector<double> out;
  for (const auto& x : *v) out.push_back(x.get<double>());
  return out;
}

const nlohmann::json& JsonFields::object(const std::string& key) {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  const nlohmann::json* v = find(key);
  if (v == nullptr) return kEmpty;
  if (!v->is_object()) {
    problem(key, cat("must be an object, got ", v->dump()));
    return kEmpty;
  }
  return *v;
}

void throw_if_problems(const std::vector<std::string>& problems, const std::string& source, const std::string& what) {
  if (problems.empty()) return;
  std::string msg =
      cat(source, ": invalid ", what, " (", problems.size(), " problem", problems.size() == 1 ? "" : "s", "):");
  for (const std::string& p : problems) msg += "\n  " + p;
  throw Error(msg);
}

}  // namespace k3
