// Normalisations, fp32 throughout.
#pragma once

#include <cstdint>

namespace k3 {

// out = x * rsqrt(mean(x^2) + eps) * weight   (weight may be nullptr = no gain), n rows of dim.
// out may alias x.
void rms_norm(const float* x, int64_t n, int64_t dim, const float* weight, float eps, float* out);

// x /= sqrt(sum(x^2) + eps), in place, n rows of dim  (fla's l2norm: eps inside the sqrt).
void l2_norm(float* x, int64_t n, int64_t dim, float eps);

// KDA output: per row of dim, out = rms_norm(x; weight, eps) * sigmoid(gate).  out may alias x.
void rms_norm_sigmoid_gated(const float* x, const float* gate, int64_t n, int64_t dim, const float* weight, float eps,
                            float* out);

}  // namespace k3
