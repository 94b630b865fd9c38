#include "kernels/mla_prefill.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "base/cpu_features.h"
#include "kernels/simd/dispatch.h"
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

namespace {
// (query, key) pairs of a causal segment: query i sees pos0 + i + 1 keys.
double causal_pairs(int64_t pos0, int64_t len) {
  return static_cast<double>(len) * pos0 + static_cast<double>(len) * (len + 1) / 2.0;
}
}  // namespace

double mla_prefill_attention_macs(const MlaPrefillShape& s, int64_t pos0, int64_t len) {
  return causal_pairs(pos0, len) * s.heads * (s.qk() + s.vdim);  // a score and a value per pair and head
}

double mla_prefill_decompress_macs(const MlaPrefillShape& s, int64_t pos0, int64_t len) {
  const double keys = static_cast<double>(pos0 + len);
  return keys * s.heads * (s.nope + s.vdim) * s.lora;
}

double mla_absorbed_attention_macs(const MlaPrefillShape& s, int64_t pos0, int64_t len) {
  return causal_pairs(pos0, len) * s.heads * (s.lora + s.width()) + mla_prefill_decompress_macs(s, 0, len);
}

bool mla_prefill_prefers_decompressed(const MlaPrefillShape& s, int64_t pos0, int64_t len) {
  constexpr double kSpeedRatio = 0.9;  // blocked FLOP rate / absorbed FLOP rate
  return mla_prefill_attention_macs(s, pos0, len) + mla_prefill_decompress_macs(s, pos0, len) <
         kSpeedRatio * mla_absorbed_attention_macs(s, pos0, len);
}

namespace portable {
namespace {

struct Ops {
  static void gemm(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t m,
                   int64_t k, int64_t n, bool acc) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float sum = acc ? C[i * ldc + j] : 0.0f;
        for (int64_t p = 0; p < k; ++p) sum += A[i * lda + p] * B[p * ldb + j];
        C[i * ldc + j] = sum;
      }
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
