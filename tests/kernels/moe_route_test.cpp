// The sigmoid router: biased selection, unbiased weights, ties, near-ties, renormalisation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/activation.h"
#include "kernels/kernel_test_util.h"
#include "kernels/moe_route.h"

namespace k3 {
namespace {

TEST(Router, SelectsByBiasedScoreWeightsByUnbiased) {
  // Expert 0 has the highest logit, but expert 2's bias pushes it ahead.
  const float logits[4] = {2.0f, 1.0f, 0.5f, -1.0f};
  const float bias[4] = {0.0f, 0.0f, 0.5f, 0.0f};
  int32_t idx[2];
  float w[2];
  route_topk(logits, bias, 4, 2, true, 1.0f, idx, w);
  EXPECT_EQ(idx[0], 2);  // sigmoid(.5)+.5 = 1.122 > sigmoid(2) = 0.881
  EXPECT_EQ(idx[1], 0);
  const double s2 = 1 / (1 + std::exp(-0.5)), s0 = 1 / (1 + std::exp(-2.0));
  EXPECT_NEAR(w[0], s2 / (s2 + s0 + 1e-20), 1e-6);
  EXPECT_NEAR(w[1], s0 / (s2 + s0 + 1e-20), 1e-6);
}

TEST(Router, TiesPickLowerIndexAndNearTiesAreResolvedExactly) {
  const float logits[6] = {0.3f, 0.7f, 0.7f, 0.7f, 0.1f, 0.7f};
  int32_t idx[3];
  float w[3];
  route_topk(logits, nullptr, 6, 3, true, 1.0f, idx, w);
  EXPECT_EQ(idx[0], 1);
  EXPECT_EQ(idx[1], 2);
  EXPECT_EQ(idx[2], 3);
  // A one-ulp lead in the biased score wins (sigmoid(0) = 0.5; one ulp of 0.5 is 2^-24).
  const float zeros[3] = {0.0f, 0.0f, 0.0f};
  const float bias[3] = {0.0f, std::nextafter(0.5f, 1.0f) - 0.5f, 0.0f};
  int32_t i1;
  float w1;
  route_topk(zeros, bias, 3, 1, true, 1.0f, &i1, &w1);
  EXPECT_EQ(i1, 1);
  EXPECT_NEAR(w1, 1.0f, 1e-6);
}

TEST(Router, ScalingAndNoRenormalisation) {
  const float logits[3] = {1.0f, 0.0f, -1.0f};
  int32_t idx[2];
  float w[2];
  route_topk(logits, nullptr, 3, 2, false, 2.5f, idx, w);
  EXPECT_NEAR(w[0], 2.5 * sigmoid(1.0f), 1e-6);
  EXPECT_NEAR(w[1], 2.5 * sigmoid(0.0f), 1e-6);
  route_topk(logits, nullptr, 3, 2, true, 2.5f, idx, w);
  EXPECT_NEAR(w[0] + w[1], 2.5, 1e-6);
}

TEST(Router, MatchesSortReferenceOnRandomInputs) {
  Rng rng(41);
  for (int trial = 0; trial < 200; ++trial) {
    const int E = 1 + static_cast<int>(rng.below(64)), K = 1 + static_cast<int>(rng.below(E));
    auto logits = testing::random_vec(rng, E, 2.0), bias = testing::random_vec(rng, E, 0.05);
    std::vector<int32_t> idx(K);
    std::vector<float> w(K);
    route_topk(logits.data(), bias.data(), E, K, true, 1.0f, idx.data(), w.data());
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return sigmoid(logits[a]) + bias[a] > sigmoid(logits[b]) + bias[b];
    });
    double sum = 0;
    for (int i = 0; i < K; ++i) sum += sigmoid(logits[order[i]]);
    for (int i = 0; i < K; ++i) {
      EXPECT_EQ(idx[i], order[i]);
      EXPECT_NEAR(w[i], sigmoid(logits[order[i]]) / sum, 1e-6);
    }
  }
}

}  // namespace
}  // namespace k3
