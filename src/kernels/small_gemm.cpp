#include "kernels/small_gemm.h"

#include "base/cpu_features.h"
#include "base/numeric_types.h"
#include "kernels/simd/dispatch.h"

namespace k3 {

void gemm_nn(const float* A, const float* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate) {
  K3_ISA_DISPATCH(active_isa(), gemm_nn(A, B, C, m, k, n, accumulate));
}

void gemm_nn(const float* A, const uint16_t* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate) {
  K3_ISA_DISPATCH(active_isa(), gemm_nn(A, B, C, m, k, n, accumulate));
}

namespace portable {
namespace {
inline float widen(float f) { return f; }
inline float widen(uint16_t h) { return bf16_to_f32(h); }

template <typename BT>
void gemm(const float* A, const BT* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate) {
  for (int64_t i = 0; i < m; ++i) {
    float* c = C + i * n;
    if (!accumulate)
      for (int64_t j = 0; j < n; ++j) c[j] = 0.0f;
    for (int64_t p = 0; p < k; ++p) {
      const float a = A[i * k + p];
      const BT* b = B + p * n;
      for (int64_t j = 0; j < n; ++j) c[j] += a * widen(b[j]);
    }
  }
}
}  // namespace

void gemm_nn(const float* A, const float* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate) {
  gemm(A, B, C, m, k, n, accumulate);
}
void gemm_nn(const float* A, const uint16_t* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate) {
  gemm(A, B, C, m, k, n, accumulate);
}
}  // namespace portable

}  // namespace k3
