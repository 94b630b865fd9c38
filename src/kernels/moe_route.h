// The Kimi/DeepSeek-V3 "noaux_tc" sigmoid router for one token (1 expert group):
//   s = sigmoid(logits); select the top k of s + bias (ties: lower expert index first);
//   w = s[selected] (UNBIASED), renormalised by (sum + 1e-20) when asked, times scale.
// Outputs are ordered by descending biased score.
#pragma once

#include <cstdint>

namespace k3 {

void route_topk(const float* logits, const float* bias, int num_experts, int k, bool renormalize, float scale,
                int32_t* experts, float* weights);

}  // namespace k3
