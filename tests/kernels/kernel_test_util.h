// Helpers for kernel tests: random data, comparisons, and running a body on every
// instruction-set level this CPU supports.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "base/cpu_features.h"
#include "base/numeric_types.h"
#include "base/rng.h"
#include "kernels/matrix.h"
#include "kernels/mxfp4.h"

namespace k3::testing {

inline std::vector<float> random_vec(Rng& rng, size_t n, double scale = 1.0) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

// max |a-b| / max(max|b|, floor)
inline double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-30) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0.0, d = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    m = std::max(m, std::fabs(static_cast<double>(b[i])));
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return d / std::max(m, floor);
}

// Runs body once per instruction set available here (ref always), restoring the default after.
inline void for_each_isa(const std::function<void(Isa)>& body) {
  const Isa saved = active_isa();
  for (Isa isa : {Isa::kRef, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    if (isa > best_isa()) continue;
    force_isa(isa);
    SCOPED_TRACE(isa_name(isa));
    body(isa);
  }
  force_isa(saved);
}

// A random matrix of `fmt` (values ~ N(0, 0.3), MXFP4 quantised row by row) and the bytes behind it.
struct TestMatrix {
  Matrix m;
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> packed, scales;
};

inline TestMatrix make_matrix(WeightFormat fmt, int64_t rows, int64_t cols, Rng& rng) {
  TestMatrix t;
  t.m.format = fmt;
  t.m.rows = rows;
  t.m.cols = cols;
  const std::vector<float> v = random_vec(rng, rows * cols, 0.3);
  switch (fmt) {
    case WeightFormat::kF32:
      t.f32 = v;
      t.m.data = t.f32.data();
      break;
    case WeightFormat::kBF16:
      for (float x : v) t.bf16.push_back(f32_to_bf16(x));
      t.m.data = t.bf16.data();
      break;
    case WeightFormat::kMxfp4:
      t.packed.resize(rows * cols / 2);
      t.scales.resize(rows * cols / 32);
      for (int64_t r = 0; r < rows; ++r)
        mxfp4_quant_row(&v[r * cols], cols, &t.packed[r * cols / 2], &t.scales[r * cols / 32]);
      t.m.data = t.packed.data();
      t.m.scales = t.scales.data();
      break;
  }
  return t;
}

}  // namespace k3::testing
