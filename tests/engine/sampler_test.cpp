// Sampling: greedy, top-k/top-p restrictions, determinism by seed, parameter validation.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "base/error.h"
#include "engine/sampler.h"

namespace k3 {
namespace {

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  const float logits[5] = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f};
  Sampler s(SamplingParams{});
  EXPECT_EQ(s.sample(logits, 5), 1);
  EXPECT_EQ(argmax(logits, 5), 1);
}

TEST(Sampler, TopKOneIsGreedy) {
  const float logits[4] = {0.3f, 0.1f, 0.9f, 0.5f};
  Sampler s(SamplingParams{1.5f, 1, 1.0f, 42});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(logits, 4), 2);
}

TEST(Sampler, SameSeedSameStreamDifferentSeedDiffers) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = std::sin(static_cast<float>(i));
  auto draw = [&](uint64_t seed) {
    Sampler s(SamplingParams{1.0f, 0, 1.0f, seed});
    std::vector<int32_t> out;
    for (int i = 0; i < 40; ++i) out.push_back(s.sample(logits.data(), 100));
    return out;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

TEST(Sampler, FrequenciesFollowTheSoftmaxAndTopPCutsTheTail) {
  const float logits[3] = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  std::map<int, int> counts;
  Sampler s(SamplingParams{1.0f, 0, 1.0f, 3});
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[s.sample(logits, 3)]++;
  EXPECT_NEAR(counts[0] / double(n), 0.6, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.1, 0.02);
  Sampler nucleus(SamplingParams{1.0f, 0, 0.8f, 4});
  for (int i = 0; i < 2000; ++i) EXPECT_NE(nucleus.sample(logits, 3), 2);  // 0.6 + 0.3 >= 0.8
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(Sampler(SamplingParams{-1.0f, 0, 1.0f, 0}), Error);
  EXPECT_THROW(Sampler(SamplingParams{1.0f, -2, 1.0f, 0}), Error);
  EXPECT_THROW(Sampler(SamplingParams{1.0f, 0, 0.0f, 0}), Error);
  EXPECT_THROW(Sampler(SamplingParams{1.0f, 0, 1.5f, 0}), Error);
  EXPECT_THROW(Sampler(SamplingParams{NAN, 0, 1.0f, 0}), Error);
}

}  // namespace
}  // namespace k3
