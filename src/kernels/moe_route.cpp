#include "kernels/moe_route.h"

#include <algorithm>
#include <vector>

#include "kernels/activation.h"

namespace k3 {

void route_topk(const float* logits, const float* bias, int num_experts, int k, bool renormalize, float scale,
                int32_t* experts, float* weights) {
  thread_local std::vector<float> score, biased;
  thread_local std::vector<int32_t> order;
  score.resize(num_experts);
  biased.resize(num_experts);
  order.resize(num_experts);
  for (int e = 0; e < num_experts; ++e) {
    score[e] = sigmoid(logits[e]);
    biased[e] = score[e] + (bias != nullptr ? bias[e] : 0.0f);
    order[e] = e;
  }
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return biased[a] != biased[b] ? biased[a] > biased[b] : a < b;
  });
  float sum = 0.0f;
  for (int i = 0; i < k; ++i) {
    experts[i] = order[i];
    weights[i] = score[order[i]];
    sum += weights[i];
  }
  const float norm = renormalize ? 1.0f / (sum + 1e-20f) : 1.0f;
  for (int i = 0; i < k; ++i) weights[i] = weights[i] * norm * scale;
}

}  // namespace k3
