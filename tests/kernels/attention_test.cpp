// Single-query softmax attention against a plain fp64 version.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/attention.h"
#include "kernels/mla_attention.h"
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

// Absorbed MLA decode (all heads over the latent cache, blocked, split over tasks of cache rows
// and merged) against a plain fp64 softmax per head.
TEST(MlaDecodeAttention, MatchesPlainSoftmaxPerHead) {
  Rng rng(32);
  for (auto [n, heads, lora, rope] : std::vector<std::tuple<int64_t, int, int, int>>{
           {1, 1, 8, 0}, {5, 3, 16, 4}, {129, 7, 37, 5}, {1100, 4, 24, 8}, {2500, 9, 64, 16}}) {
    const int width = lora + rope;
    auto q = testing::random_vec(rng, heads * width), cache = testing::random_vec(rng, n * width);
    for (float& x : q) x *= 3.0f;  // peaked softmax
    const float scale = 1.0f / std::sqrt(static_cast<float>(width));
    std::vector<std::vector<float>> outs;
    testing::for_each_isa([&](Isa) {
      outs.emplace_back(heads * lora);
      mla_decode_attention(q.data(), cache.data(), n, heads, lora, rope, scale, outs.back().data());
    });
    for (int h = 0; h < heads; ++h) {
      std::vector<double> s(n);
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int d = 0; d < width; ++d) dot += static_cast<double>(q[h * width + d]) * cache[j * width + d];
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int c = 0; c < lora; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += s[j] / sum * cache[j * width + c];
        for (const auto& out : outs) ASSERT_NEAR(out[h * lora + c], acc, 2e-5) << n << " h" << h << " c" << c;
      }
    }
  }
}

}  // namespace
}  // namespace k3
