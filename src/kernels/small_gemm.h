// Small dense products in "outer-product" form, for shapes whose reduction dimension is short
// (the chunk-sized products of chunked KDA):
//   C[m][n] (+)= sum_p A[m][p] * B[p][n]      all row-major fp32, leading dimensions = widths
// Vectorised along n; the dot-product form (linear.h) is better when the reduction is long.
#pragma once

#include <cstdint>

namespace k3 {

// accumulate: add to C instead of overwriting it.  B may be fp32 or bf16 (uint16_t).
void gemm_nn(const float* A, const float* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate);
void gemm_nn(const float* A, const uint16_t* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate);

// The plain loops: the baseline-ISA level (Isa::kRef).
namespace portable {
void gemm_nn(const float* A, const float* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate);
void gemm_nn(const float* A, const uint16_t* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate);
}
// The vector tiles (small_gemm_tiles.h, built by linear_isa.cpp per level).
namespace avx512 {
void gemm_nn(const float* A, const float* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate);
void gemm_nn(const float* A, const uint16_t* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate);
}
namespace avx2 {
void gemm_nn(const float* A, const float* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate);
void gemm_nn(const float* A, const uint16_t* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate);
}

}  // namespace k3
