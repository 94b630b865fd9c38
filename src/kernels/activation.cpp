#include "kernels/activation.h"

namespace k3 {

void situ_glu(const float* g, const float* u, int64_t n, float b1, float b2, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = situ_glu(g[i], u[i], b1, b2);
}

void silu_glu(const float* g, const float* u, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu(g[i]) * u[i];
}

}  // namespace k3
