// Reads typed fields out of a JSON config object while collecting every problem, so a bad
// config is reported once with all of its faults, each named by its JSON path
// ("vision_config.vt_hidden_size: must be a positive integer").
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace k3 {

class JsonFields {
 public:
  // `obj` must outlive this reader; `path` prefixes field names in messages ("vision_config.").
  JsonFields(const nlohmann::json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  // Required when `fallback` is empty.  Integers must lie in [min, max].
  int integer(const std::string& key, std::optional<int> fallback, int min = 1, int max = 1 << 30);
  double number(const std::string& key, std::optional<double> fallback, double min, double max);
  bool boolean(const std::string& key, std::optional<bool> fallback);
  std::string string(const std::string& key, std::optional<std::string> fallback);
  // A field that must equal one of `allowed` (k3 implements only these); absent = fallback.
  std::string choice(const std::string& key, const std::vector<std::string>& allowed,
                     std::optional<std::string> fallback);
  // A JSON array of numbers; absent = fallback.
  std::vector<double> numbers(const std::string& key, std::vector<double> fallback, size_t size);
  // A nested object (absent or null = an empty object).
  const nlohmann::json& object(const std::string& key);

  void problem(const std::string& key, const std::string& what);
  std::vector<std::string>& problems() { return problems_; }
  const std::string& path() const { return path_; }

 private:
  const nlohmann::json* find(const std::string& key);
  template <typename T, typename Valid>
  T typed(const std::string& key, const std::optional<T>& fallback, const T& none, const std::string& what,
          Valid valid);
  const nlohmann::json& obj_;
  std::string path_;
  std::vector<std::string> problems_;
};

// Throws one k3::Error listing `problems` (if any) under "source: invalid <what>".
void throw_if_problems(const std::vector<std::string>& problems, const std::string& source, const std::string& what);

}  // namespace k3
