// Single-query softmax attention against a plain fp64 version.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/attention.h"
#include "kernels/kernel_test_util.h"

namespace k3 {
namespace {

TEST(Attention, MatchesPlainSoftmax) {
  Rng rng(31);
  for (auto [n, dk, dv] : std::vector<std::tuple<int64_t, int, int>>{{1, 8, 8}, {5, 24, 16}, {77, 576, 512}, {300, 3, 1}}) {
    const int64_t ldk = dk + 3, ldv = dv + 5;  // strided rows
    auto q = testing::random_vec(rng, dk), keys = testing::random_vec(rng, n * ldk), values = testing::random_vec(rng, n * ldv);
    std::vector<float> out(dv), scratch(n);
    const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
    attend_one(q.data(), keys.data(), ldk, values.data(), ldv, n, dk, dv, scale, out.data(), scratch.data());
    std::vector<double> s(n);
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int d = 0; d < dk; ++d) dot += static_cast<double>(q[d]) * keys[j * ldk + d];
      s[j] = dot * scale;
      mx = std::max(mx, s[j]);
    }
    for (auto& x : s) sum += (x = std::exp(x - mx));
    for (int d = 0; d < dv; ++d) {
      double acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += s[j] / sum * values[j * ldv + d];
      EXPECT_NEAR(out[d], acc, 1e-5) << n << " " << d;
    }
  }
}

TEST(Attention, LargeScoresDoNotOverflow) {
  std::vector<float> q = {1000.0f}, keys = {1000.0f, -1000.0f, 999.0f}, values = {1.0f, 2.0f, 3.0f}, out(1), scr(3);
  attend_one(q.data(), keys.data(), 1, values.data(), 1, 3, 1, 1, 1.0f, out.data(), scr.data());
  EXPECT_TRUE(std::isfinite(out[0]));
  EXPECT_NEAR(out[0], 1.0, 1e-6);
}

}  // namespace
}  // namespace k3
