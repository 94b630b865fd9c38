#include "kernels/mla_prefill.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "base/cpu_features.h"
#include "kernels/simd/dispatch.h"
#include "kernels/small_gemm.h"
#include "kernels/mla_prefill_tiles.h"

namespace k3 {

void mla_prefill_attention(const Matrix& kv_b, const MlaPrefillShape& s, const float* q, const float* cache,
                           int64_t pos0, int64_t len, float scale, float* o, int64_t ldo) {
  K3_ISA_DISPATCH(active_isa(), mla_prefill_attention(kv_b, s, q, cache, pos0, len, scale, o, ldo));
}

void mla_prefill_attention(const Matrix& kv_b, const MlaPrefillShape& s, const float* q, const uint16_t* cache_bf16,
                           int64_t pos0, int64_t len, float scale, float* o, int64_t ldo) {
  K3_ISA_DISPATCH(active_isa(), mla_prefill_attention(kv_b, s, q, cache_bf16, pos0, len, scale, o, ldo));
}

double mla_prefill_attention_macs(const MlaPrefillShape& s, int64_t pos0, int64_t len) {
  // Query i sees pos0 + i + 1 keys; each costs qk (score) + vdim (value) per head.
  const double pairs = static_cast<double>(len) * pos0 + static_cast<double>(len) * (len + 1) / 2.0;
  return pairs * s.heads * (s.qk() + s.vdim);
}

double mla_prefill_decompress_macs(const MlaPrefillShape& s, int64_t pos0, int64_t len) {
  const double keys = static_cast<double>(pos0 + len);
  return keys * s.heads * (s.nope + s.vdim) * s.lora;
}

namespace portable {
namespace {

struct Ops {
  static void gemm(const float* A, const float* B, float* C, int64_t m, int64_t k, int64_t n, bool acc) {
    portable::gemm_nn(A, B, C, m, k, n, acc);
  }
  static float row_max(const float* s, int64_t n) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, s[j]);
    return mx;
  }
  static float exp_sum(float* s, int64_t n, float mx) {
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      s[j] = std::exp(s[j] - mx);
      sum += s[j];
    }
    return sum;
  }
  static void scale_row(float* o, int64_t n, float c) {
    for (int64_t j = 0; j < n; ++j) o[j] *= c;
  }
};

using Blocked = mla_prefill_detail::Blocked<Ops>;

}  // namespace

void mla_prefill_attention(const Matrix& kv_b, const MlaPrefillShape& s, const float* q, const float* cache,
                           int64_t pos0, int64_t len, float scale, float* o, int64_t ldo) {
  Blocked::run(kv_b, s, q, cache, pos0, len, scale, o, ldo);
}

void mla_prefill_attention(const Matrix& kv_b, const MlaPrefillShape& s, const float* q, const uint16_t* cache_bf16,
                           int64_t pos0, int64_t len, float scale, float* o, int64_t ldo) {
  Blocked::run(kv_b, s, q, cache_bf16, pos0, len, scale, o, ldo);
}

}  // namespace portable
}  // namespace k3
