#include "kernels/norm.h"

#include <cmath>

#include "kernels/activation.h"

namespace k3 {

void rms_norm(const float* x, int64_t n, int64_t dim, const float* weight, float eps, float* out) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * dim;
    float* yr = out + r * dim;
    float ss = 0.0f;
    for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    if (weight != nullptr) {
      for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * weight[i];
    } else {
      for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv;
    }
  }
}

void l2_norm(float* x, int64_t n, int64_t dim, float eps) {
  for (int64_t r = 0; r < n; ++r) {
    float* xr = x + r * dim;
    float ss = 0.0f;
    for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss + eps);
    for (int64_t i = 0; i < dim; ++i) xr[i] *= inv;
  }
}

void rms_norm_sigmoid_gated(const float* x, const float* gate, int64_t n, int64_t dim, const float* weight, float eps,
                            float* out) {
  rms_norm(x, n, dim, weight, eps, out);
  mul_sigmoid(out, gate, n * dim, out);
}

}  // namespace k3
