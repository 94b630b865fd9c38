// Picks the next token from a row of logits.  The logits are first adjusted, when asked, in this
// order (the rules of vLLM / the OpenAI API):
//   logit_bias          logits[t] += bias[t]
//   repetition_penalty  tokens of the prompt or the output so far: l > 0 ? l / r : l * r
//   frequency_penalty   minus f times the token's count in the output so far
//   presence_penalty    minus p for every token already in the output
// then greedy (argmax, lowest id on ties) when the temperature is 0, otherwise temperature ->
// top-k -> top-p (nucleus) -> min-p (tokens below min_p x the top token's probability go)
// sampling from a seeded, platform-independent generator.  A Sampler belongs to one sequence:
// it counts the tokens it returned.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/rng.h"

namespace k3 {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 0;             // 0 = no limit
  float top_p = 1.0f;        // 1 = no limit
  uint64_t seed = 0;
  float min_p = 0.0f;               // [0, 1]; 0 = off
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  float repetition_penalty = 1.0f;  // (0, 2]; 1 = off
  std::vector<std::pair<int32_t, float>> logit_bias = {};  // (token, bias in [-100, 100])
};

// Throws k3::Error for out-of-range parameters; vocab > 0 also checks logit_bias's tokens.
void validate(const SamplingParams& p, int64_t vocab = 0);

class Sampler {
 public:
  // prompt: the sequence's prompt (only kept, as a set, for repetition_penalty).
  explicit Sampler(const SamplingParams& params, std::span<const int32_t> prompt = {});
  // The next token; it counts as output from then on (for the penalties).
  int32_t sample(const float* logits, int64_t vocab);

 private:
  bool adjusts() const;
  // Greedy or sampled choice from (adjusted) logits.
  int32_t pick(const float* logits, int64_t vocab);
  // The logits with bias and penalties applied (into work_).
  const float* adjusted(const float* logits, int64_t vocab);

  SamplingParams params_;
  Rng rng_;
  std::unordered_set<int32_t> prompt_tokens_;
  std::unordered_map<int32_t, int> output_counts_;
  std::vector<float> work_;
};

int32_t argmax(const float* logits, int64_t n);

}  // namespace k3
