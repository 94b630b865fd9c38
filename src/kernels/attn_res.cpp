#include "kernels/attn_res.h"

#include <cmath>
#include <vector>

namespace k3 {

void attn_res_mix(const float* const* sources, int num_sources, int64_t dim, const float* query, float eps, float* out) {
  thread_local std::vector<float> score;
  score.resize(num_sources);
  float mx = -INFINITY;
  for (int j = 0; j < num_sources; ++j) {
    const float* v = sources[j];
    float ss = 0.0f, dot = 0.0f;
    for (int64_t i = 0; i < dim; ++i) {
      ss += v[i] * v[i];
      dot += v[i] * query[i];
    }
    score[j] = dot / std::sqrt(ss / static_cast<float>(dim) + eps);
    mx = std::fmax(mx, score[j]);
  }
  float sum = 0.0f;
  for (int j = 0; j < num_sources; ++j) {
    score[j] = std::exp(score[j] - mx);
    sum += score[j];
  }
  for (int64_t i = 0; i < dim; ++i) out[i] = 0.0f;
  for (int j = 0; j < num_sources; ++j) {
    const float p = score[j] / sum;
    const float* v = sources[j];
    for (int64_t i = 0; i < dim; ++i) out[i] += p * v[i];
  }
}

}  // namespace k3
