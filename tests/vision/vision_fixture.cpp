#include "vision_fixture.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "support/test_support.h"

namespace k3::testing {

VisionFixture::VisionFixture()
    : dir(fixture_dir("vision-tiny-a")),
      meta(nlohmann::json::parse(read_file(dir + "/golden.json"))),
      golden(dir + "/golden.safetensors") {}

std::vector<float> VisionFixture::f32(const std::string& name) const { return read_f32(golden, name); }

std::vector<int64_t> VisionFixture::i64(const std::string& name) const {
  const TensorView* t = golden.find(name);
  if (t == nullptr || t->dtype != DType::kI64) {
    ADD_FAILURE() << "no I64 tensor " << name;
    return {};
  }
  std::vector<int64_t> v(t->numel());
  std::memcpy(v.data(), t->data, t->nbytes);
  return v;
}

void Diff::add(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) {
    ADD_FAILURE() << "size " << got.size() << " != golden size " << want.size();
    max_abs = INFINITY;
    return;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    max_abs = std::isnan(d) ? INFINITY : std::max(max_abs, d);
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[i])));
  }
}

std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace k3::testing
