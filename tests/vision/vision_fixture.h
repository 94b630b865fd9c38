// The vision-tiny-a golden fixture (tests/data/fixtures/vision-tiny-a): golden.json metadata,
// golden.safetensors tensors, error statistics for comparing against them, and the message of a
// k3::Error for tests of clear failures.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace k3::testing {

struct VisionFixture {
  VisionFixture();
  std::string dir;
  nlohmann::json meta;  // golden.json
  SafetensorsFile golden;

  int images() const { return static_cast<int>(meta["images"].size()); }
  const nlohmann::json& image(int i) const { return meta["images"][i]; }
  std::string image_path(int i) const { return dir + "/" + image(i)["file"].get<std::string>(); }
  std::vector<float> f32(const std::string& name) const;
  std::vector<int64_t> i64(const std::string& name) const;
  double tolerance(const char* which) const { return meta["tolerances"][which]["max_abs"].get<double>(); }
};

struct Diff {
  double max_abs = 0, max_ref = 0;
  void add(const std::vector<float>& got, const std::vector<float>& want);
  double rel() const { return max_ref > 0 ? max_abs / max_ref : max_abs; }
};

// The what() of the k3::Error that f throws, or "(no error)".
std::string error_message(const std::function<void()>& f);

}  // namespace k3::testing
