// Block AttnRes aggregation against a plain fp64 version of the formula in attn_res.h.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/attn_res.h"
#include "kernels/kernel_test_util.h"

namespace k3 {
namespace {

TEST(AttnRes, MixesRawSourcesWithNormalisedKeys) {
  Rng rng(51);
  for (int n : {1, 2, 5, 9}) {
    for (int64_t dim : {3, 64, 130}) {
      std::vector<std::vector<float>> src;
      for (int j = 0; j < n; ++j) src.push_back(testing::random_vec(rng, dim, 0.5 + j));
      auto query = testing::random_vec(rng, dim, 0.3);
      std::vector<const float*> ptr;
      for (auto& s : src) ptr.push_back(s.data());
      std::vector<float> out(dim);
      attn_res_mix(ptr.data(), n, dim, query.data(), 1e-5f, out.data());
      std::vector<double> score(n);
      double mx = -1e300;
      for (int j = 0; j < n; ++j) {
        double ss = 0, dot = 0;
        for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(src[j][i]) * src[j][i];
        const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
        for (int64_t i = 0; i < dim; ++i) dot += src[j][i] * inv * query[i];
        score[j] = dot;
        mx = std::max(mx, dot);
      }
      double sum = 0;
      for (auto& s : score) sum += (s = std::exp(s - mx));
      for (int64_t i = 0; i < dim; ++i) {
        double want = 0;
        for (int j = 0; j < n; ++j) want += score[j] / sum * src[j][i];
        EXPECT_NEAR(out[i], want, 1e-5 * (1 + std::fabs(want)));
      }
    }
  }
}

TEST(AttnRes, SingleSourceIsIdentity) {
  std::vector<float> v = {1.5f, -2.0f, 0.25f}, q = {3.0f, 1.0f, -7.0f}, out(3);
  const float* p = v.data();
  attn_res_mix(&p, 1, 3, q.data(), 1e-5f, out.data());
  EXPECT_EQ(out, v);
}

}  // namespace
}  // namespace k3
