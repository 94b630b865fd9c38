// Helpers for kernel tests: random data, comparisons, and running a body on every
// instruction-set level this CPU supports.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "base/cpu_features.h"
#include "base/rng.h"

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

}  // namespace k3::testing
