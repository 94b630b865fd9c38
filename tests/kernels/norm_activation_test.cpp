// Norms and activations against plain fp64 formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/activation.h"
#include "kernels/kernel_test_util.h"
#include "kernels/norm.h"

namespace k3 {
namespace {

using testing::random_vec;

TEST(RmsNorm, MatchesFormulaWithAndWithoutGain) {
  Rng rng(2);
  for (int64_t dim : {1, 7, 16, 33, 128, 1000}) {
    const int64_t n = 3;
    auto x = random_vec(rng, n * dim, 2.0);
    auto w = random_vec(rng, dim);
    for (bool gain : {true, false}) {
      std::vector<float> y(n * dim);
      rms_norm(x.data(), n, dim, gain ? w.data() : nullptr, 1e-5f, y.data());
      for (int64_t r = 0; r < n; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
        const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
        for (int64_t i = 0; i < dim; ++i)
          EXPECT_NEAR(y[r * dim + i], x[r * dim + i] * inv * (gain ? w[i] : 1.0), 1e-5);
      }
    }
  }
}

TEST(RmsNorm, EpsMatters) {
  // A small-norm row: eps 1e-6 and 1e-5 must give visibly different results (MLA latents).
  std::vector<float> x = {1e-3f, -2e-3f, 1.5e-3f, 0.5e-3f}, a(4), b(4);
  rms_norm(x.data(), 1, 4, nullptr, 1e-6f, a.data());
  rms_norm(x.data(), 1, 4, nullptr, 1e-5f, b.data());
  EXPECT_GT(std::fabs(a[1] - b[1]), 0.1);
}

TEST(L2Norm, EpsInsideSqrt) {
  std::vector<float> x = {3.0f, 4.0f};
  l2_norm(x.data(), 1, 2, 1e-6f);
  EXPECT_NEAR(x[0], 3.0 / std::sqrt(25.0 + 1e-6), 1e-7);
  std::vector<float> z = {0.0f, 0.0f};
  l2_norm(z.data(), 1, 2, 1e-6f);  // no division by zero
  EXPECT_EQ(z[0], 0.0f);
}

TEST(GatedRmsNorm, NormThenSigmoidGate) {
  Rng rng(4);
  const int64_t n = 5, dim = 48;
  auto x = random_vec(rng, n * dim), g = random_vec(rng, n * dim, 3.0), w = random_vec(rng, dim);
  std::vector<float> y(n * dim);
  rms_norm_sigmoid_gated(x.data(), g.data(), n, dim, w.data(), 1e-5f, y.data());
  for (int64_t r = 0; r < n; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
    for (int64_t i = 0; i < dim; ++i) {
      const double gate = 1.0 / (1.0 + std::exp(-static_cast<double>(g[r * dim + i])));
      EXPECT_NEAR(y[r * dim + i], x[r * dim + i] * inv * w[i] * gate, 1e-5);
    }
  }
}

TEST(Situ, FormulaAndBounds) {
  Rng rng(6);
  for (int i = 0; i < 2000; ++i) {
    const double g = rng.normal() * 10, u = rng.normal() * 40;
    const double want = (4.0 * std::tanh(g / 4.0) / (1.0 + std::exp(-g))) * (25.0 * std::tanh(u / 25.0));
    const float got = situ_glu(static_cast<float>(g), static_cast<float>(u), 4.0f, 25.0f);
    EXPECT_NEAR(got, want, 1e-4 * (1.0 + std::fabs(want)));
    EXPECT_LE(std::fabs(got), 100.0f);
  }
  // The sigmoid reads the raw gate: for g = 8, sigmoid(8) not sigmoid(4 tanh 2).
  EXPECT_NEAR(situ_glu(8.0f, 1.0f, 4.0f, 25.0f),
              4.0 * std::tanh(2.0) / (1.0 + std::exp(-8.0)) * 25.0 * std::tanh(1.0 / 25.0), 1e-5);
  std::vector<float> g = {1, -2, 30}, u = {0.5, 100, -3}, out(3);
  situ_glu(g.data(), u.data(), 3, 4.0f, 25.0f, out.data());
  for (int i = 0; i < 3; ++i) {
    const float want = situ_glu(g[i], u[i], 4.0f, 25.0f);
    EXPECT_NEAR(out[i], want, 1e-6 * std::fabs(want));
  }
}

// The vector kernels (every ISA here) against the fp64 formulas, over array lengths that are and
// are not multiples of the vector width, inputs from tiny to saturating, and an array long
// enough to be split over the thread pool.
TEST(Situ, VectorKernelsMatchTheFormula) {
  Rng rng(16);
  std::vector<float> g, u;
  for (double scale : {1e-3, 0.3, 1.0, 3.0, 30.0, 300.0})
    for (int i = 0; i < 4000; ++i) {
      g.push_back(static_cast<float>(rng.normal() * scale));
      u.push_back(static_cast<float>(rng.normal() * scale * 4));
    }
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 0.4999f, 0.5f, 0.5001f, -0.5f, 2.0f, -2.0f, 44.0f, 88.0f, -88.0f,
                  1000.0f, -1000.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()})
    for (float w : {0.0f, 1.0f, -3.0f, 2.0f * 25.0f, v}) g.push_back(v), u.push_back(w);
  const int64_t total = static_cast<int64_t>(g.size());
  auto situ64 = [](double x, double y) {
    return (4.0 * std::tanh(x / 4.0) / (1.0 + std::exp(-x))) * (25.0 * std::tanh(y / 25.0));
  };
  auto silu64 = [](double x, double y) { return x / (1.0 + std::exp(-x)) * y; };
  testing::for_each_isa([&](Isa) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{37}, int64_t{1000}, total}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n);
      std::vector<float> a(n), b(n), sg(n), sl(n), ms(n);
      situ_glu(g.data(), u.data(), n, 4.0f, 25.0f, a.data());
      silu_glu(g.data(), u.data(), n, b.data());
      sigmoid(g.data(), n, sg.data());
      silu(g.data(), n, sl.data());
      mul_sigmoid(u.data(), g.data(), n, ms.data());
      for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(g[i]) || !std::isfinite(u[i])) continue;
        const double s64 = 1.0 / (1.0 + std::exp(-static_cast<double>(g[i])));
        ASSERT_NEAR(sg[i], s64, 1e-6 * s64 + 1e-30) << "sigmoid " << g[i];
        ASSERT_NEAR(sl[i], g[i] * s64, 1e-6 * std::fabs(g[i] * s64) + 1e-30) << "silu " << g[i];
        ASSERT_NEAR(ms[i], u[i] * s64, 1e-6 * std::fabs(u[i] * s64) + 1e-30) << "mul_sigmoid " << g[i];
      }
      // Position independence: an element's value does not depend on where it sits (vector body
      // or tail), which continuous batching relies on.
      if (n > 20) {
        std::vector<float> shifted(n - 3);
        situ_glu(g.data() + 3, u.data() + 3, n - 3, 4.0f, 25.0f, shifted.data());
        for (int64_t i = 3; i < n; ++i) ASSERT_EQ(shifted[i - 3], a[i]) << i;
      }
      for (int64_t i = 0; i < n; ++i) {
        const double want = situ64(g[i], u[i]);
        ASSERT_NEAR(a[i], want, 1e-6 * std::fabs(want) + 1e-30) << "situ g=" << g[i] << " u=" << u[i];
        if (std::isfinite(g[i]) && std::isfinite(u[i])) {
          const double ws = silu64(g[i], u[i]);
          ASSERT_NEAR(b[i], ws, 1e-6 * std::fabs(ws) + 1e-30) << "silu g=" << g[i] << " u=" << u[i];
        }
      }
    }
  });
}

TEST(Activations, SiluSoftplusSigmoid) {
  EXPECT_NEAR(sigmoid(0.0f), 0.5f, 1e-7);
  EXPECT_NEAR(silu(2.0f), 2.0 / (1.0 + std::exp(-2.0)), 1e-6);
  EXPECT_NEAR(softplus(1.0f), std::log1p(std::exp(1.0)), 1e-6);
  EXPECT_EQ(softplus(25.0f), 25.0f);  // threshold 20
  std::vector<float> g = {1, -2}, u = {3, 4}, out(2);
  silu_glu(g.data(), u.data(), 2, out.data());
  EXPECT_NEAR(out[1], silu(-2.0f) * 4.0f, 1e-6);
}

}  // namespace
}  // namespace k3
