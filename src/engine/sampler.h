// Picks the next token from a row of logits: greedy (argmax, lowest id on ties) when the
// temperature is 0, otherwise temperature -> top-k -> top-p (nucleus) sampling from a seeded,
// platform-independent generator.
#pragma once

#include <cstdint>
#include <optional>

#include "base/rng.h"

namespace k3 {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 0;             // 0 = no limit
  float top_p = 1.0f;        // 1 = no limit
  uint64_t seed = 0;
};

// Throws k3::Error for out-of-range parameters.
void validate(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  int32_t sample(const float* logits, int64_t vocab);

 private:
  SamplingParams params_;
  Rng rng_;
};

int32_t argmax(const float* logits, int64_t n);

}  // namespace k3
