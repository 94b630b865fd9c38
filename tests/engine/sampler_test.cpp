// Sampling: greedy, top-k/top-p/min-p restrictions, logit bias and the penalties (sequences
// worked out by hand), determinism by seed, parameter validation.
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

std::vector<int32_t> greedy_run(const SamplingParams& p, std::vector<float> logits, int steps,
                                std::vector<int32_t> prompt = {}) {
  Sampler s(p, prompt);
  std::vector<int32_t> out;
  for (int i = 0; i < steps; ++i) out.push_back(s.sample(logits.data(), static_cast<int64_t>(logits.size())));
  return out;
}

TEST(Sampler, LogitBiasShiftsTheChoice) {
  SamplingParams p;
  p.logit_bias = {{2, 0.95f}};  // 0.1 + 0.95 = 1.05 > 1.0
  EXPECT_EQ(greedy_run(p, {1.0f, 0.9f, 0.1f}, 3), (std::vector<int32_t>{2, 2, 2}));
  p.logit_bias = {{2, 0.85f}};  // 0.95 < 1.0
  EXPECT_EQ(greedy_run(p, {1.0f, 0.9f, 0.1f}, 1), (std::vector<int32_t>{0}));
  p.logit_bias = {{0, -100.0f}};
  EXPECT_EQ(greedy_run(p, {1.0f, 0.9f, 0.1f}, 2), (std::vector<int32_t>{1, 1}));
}

TEST(Sampler, FrequencyAndPresencePenaltiesCountTheOutput) {
  SamplingParams f;
  f.frequency_penalty = 0.5f;
  // {1.0, 0.9, 0.1} -> 0 | {0.5, 0.9, 0.1} -> 1 | {0.5, 0.4, 0.1} -> 0 | {0, 0.4, 0.1} -> 1 | {0, -0.1, 0.1} -> 2
  EXPECT_EQ(greedy_run(f, {1.0f, 0.9f, 0.1f}, 5), (std::vector<int32_t>{0, 1, 0, 1, 2}));
  SamplingParams p;
  p.presence_penalty = 0.5f;
  // {1.0, 0.9, 0.1} -> 0 | {0.5, 0.9, 0.1} -> 1 | {0.5, 0.4, 0.1} -> 0, and so on (presence does not grow)
  EXPECT_EQ(greedy_run(p, {1.0f, 0.9f, 0.1f}, 4), (std::vector<int32_t>{0, 1, 0, 0}));
  SamplingParams neg;
  neg.presence_penalty = -0.5f;  // a negative penalty favours what was said
  EXPECT_EQ(greedy_run(neg, {0.9f, 1.0f, 0.1f}, 3), (std::vector<int32_t>{1, 1, 1}));
}

TEST(Sampler, RepetitionPenaltyCoversPromptAndOutputOnce) {
  SamplingParams r;
  r.repetition_penalty = 2.0f;
  // Prompt {1}: {1.0, 0.75, -0.5} -> 0 | {0.5, 0.75, -0.5} -> 1 | unchanged (applied once) -> 1
  EXPECT_EQ(greedy_run(r, {1.0f, 1.5f, -0.5f}, 3, {1}), (std::vector<int32_t>{0, 1, 1}));
  // A negative logit is multiplied: prompt {0}: {-0.2, -0.3} -> {-0.4, -0.3} -> 1
  EXPECT_EQ(greedy_run(r, {-0.2f, -0.3f}, 1, {0}), (std::vector<int32_t>{1}));
  EXPECT_EQ(greedy_run(SamplingParams{}, {-0.2f, -0.3f}, 1, {0}), (std::vector<int32_t>{0}));
}

TEST(Sampler, TinyRepetitionPenaltyStaysFinite) {
  // r = 1e-38 boosts the prompt's token 2 (l / r): that overflowed to +inf, the softmax became
  // NaN, and sampling fell through to the least likely token (0) instead.
  SamplingParams p;
  p.repetition_penalty = 1e-38f;
  p.temperature = 1.0f;
  const std::vector<float> logits = {-3.0f, 1.0f, 5.0f};  // 5 / 1e-38 > FLT_MAX
  const std::vector<int32_t> prompt = {2};
  for (uint64_t seed = 0; seed < 8; ++seed) {
    p.seed = seed;
    Sampler s(p, prompt);
    EXPECT_EQ(s.sample(logits.data(), 3), 2) << seed;
  }
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheTop) {
  const float logits[3] = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  SamplingParams p{1.0f, 0, 1.0f, 5};
  p.min_p = 0.2f;  // floor 0.12: token 2 (0.1) goes, token 1 (0.3) stays
  Sampler s(p);
  std::map<int, int> counts;
  for (int i = 0; i < 4000; ++i) counts[s.sample(logits, 3)]++;
  EXPECT_EQ(counts[2], 0);
  EXPECT_NEAR(counts[1] / 4000.0, 1.0 / 3.0, 0.03);
  p.min_p = 1.0f;  // only the top token
  Sampler top(p);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(top.sample(logits, 3), 0);
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(Sampler(SamplingParams{-1.0f, 0, 1.0f, 0}), Error);
  EXPECT_THROW(Sampler(SamplingParams{1.0f, -2, 1.0f, 0}), Error);
  EXPECT_THROW(Sampler(SamplingParams{1.0f, 0, 0.0f, 0}), Error);
  EXPECT_THROW(Sampler(SamplingParams{1.0f, 0, 1.5f, 0}), Error);
  EXPECT_THROW(Sampler(SamplingParams{NAN, 0, 1.0f, 0}), Error);
  const auto bad = [](auto set) {
    SamplingParams p;
    set(p);
    return p;
  };
  EXPECT_THROW(Sampler(bad([](SamplingParams& p) { p.min_p = 1.5f; })), Error);
  EXPECT_THROW(Sampler(bad([](SamplingParams& p) { p.presence_penalty = 2.5f; })), Error);
  EXPECT_THROW(Sampler(bad([](SamplingParams& p) { p.frequency_penalty = -3.0f; })), Error);
  EXPECT_THROW(Sampler(bad([](SamplingParams& p) { p.repetition_penalty = 0.0f; })), Error);
  EXPECT_THROW(Sampler(bad([](SamplingParams& p) { p.logit_bias = {{1, 101.0f}}; })), Error);
  const SamplingParams far = bad([](SamplingParams& p) { p.logit_bias = {{10, 1.0f}}; });
  EXPECT_NO_THROW(validate(far));
  EXPECT_THROW(validate(far, 10), Error);
  EXPECT_NO_THROW(validate(far, 11));
}

}  // namespace
}  // namespace k3
