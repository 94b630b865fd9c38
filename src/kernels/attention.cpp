#include "kernels/attention.h"

#include <cmath>
#include <limits>

namespace k3 {

void attend_one(const float* q, const float* keys, int64_t ldk, const float* values, int64_t ldv, int64_t n, int dk,
                int dv, float scale, float* out, float* scratch) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t s = 0; s < n; ++s) {
    const float* ks = keys + s * ldk;
    float dot = 0.0f;
    for (int d = 0; d < dk; ++d) dot += q[d] * ks[d];
    scratch[s] = dot * scale;
    mx = std::fmax(mx, scratch[s]);
  }
  float sum = 0.0f;
  for (int64_t s = 0; s < n; ++s) {
    scratch[s] = std::exp(scratch[s] - mx);
    sum += scratch[s];
  }
  const float inv = 1.0f / sum;
  for (int d = 0; d < dv; ++d) out[d] = 0.0f;
  for (int64_t s = 0; s < n; ++s) {
    const float p = scratch[s] * inv;
    const float* vs = values + s * ldv;
    for (int d = 0; d < dv; ++d) out[d] += p * vs[d];
  }
}

}  // namespace k3
