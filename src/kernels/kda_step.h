// The token-by-token KDA recurrence on a key-major state S[k][v] (shared source: kda.cpp
// compiles it as the portable version, kda_isa.cpp compiles the very same loops once per
// instruction-set level).  Every loop is element-wise along v (no horizontal sums).
//
// Internal linkage on purpose: each including file compiles its own copy for its own
// instruction set.  An inline function with external linkage would be merged by the linker into
// one arbitrary copy, silently running one level's instructions on every path.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/kda.h"

namespace k3::kda_detail {
namespace {

void recurrent_kfirst(const KdaHeadIO& io, int64_t T, int K, int V, float* __restrict state) {
  std::vector<float> pred(V), u(V);
  for (int64_t t = 0; t < T; ++t) {
    const float* q = io.q + t * io.stride_qk;
    const float* k = io.k + t * io.stride_qk;
    const float* v = io.v + t * io.stride_v;
    const float* g = io.g + t * io.stride_g;
    const float beta = io.beta[t * io.stride_beta];
    float* __restrict o = io.o + t * io.stride_o;
    float* __restrict p = pred.data();
    float* __restrict uu = u.data();
    for (int j = 0; j < V; ++j) p[j] = 0.0f;
    // 1) decay the rows, 2) predict v from the decayed state.
    for (int d = 0; d < K; ++d) {
      float* __restrict row = state + static_cast<int64_t>(d) * V;
      const float a = std::exp(g[d]), kd = k[d];
      for (int j = 0; j < V; ++j) {
        row[j] = row[j] * a;
        p[j] = p[j] + kd * row[j];
      }
    }
    // 3) the error, scaled by beta; 4) rank-1 write; 5) read with q after the write.
    for (int j = 0; j < V; ++j) {
      uu[j] = beta * (v[j] - p[j]);
      o[j] = 0.0f;
    }
    for (int d = 0; d < K; ++d) {
      float* __restrict row = state + static_cast<int64_t>(d) * V;
      const float kd = k[d], qd = q[d];
      for (int j = 0; j < V; ++j) {
        row[j] = row[j] + kd * uu[j];
        o[j] = o[j] + qd * row[j];
      }
    }
  }
}

}  // namespace
}  // namespace k3::kda_detail
