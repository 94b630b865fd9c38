// The AVX2/FMA dense linear kernel (linear_tiles.h) and small GEMM (small_gemm_tiles.h), for CPUs
// without AVX-512; MXFP4 weights go to linear_mxfp4_avx2.cpp.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "base/numeric_types.h"
#include "kernels/linear.h"
#include "kernels/matrix.h"
#include "kernels/small_gemm.h"

// Everything below is compiled for this instruction set; the headers above (standard library
// included) keep the baseline target, so no shared inline code ever carries these instructions.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "kernels/linear_avx2_traits.h"
#include "kernels/linear_tiles.h"
#include "kernels/small_gemm_tiles.h"

namespace k3::avx2 {

void linear_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  if (w.format == WeightFormat::kMxfp4) {
    linear_rows_mxfp4(w, x, n, y, r0, r1);
    return;
  }
  tiles::Linear<Traits>::rows(w, x, n, y, r0, r1);
}

void gemm_nn(const float* A, const float* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate) {
  tiles::SmallGemm<Traits>::run(A, B, C, m, k, n, accumulate);
}
void gemm_nn(const float* A, const uint16_t* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate) {
  tiles::SmallGemm<Traits>::run(A, B, C, m, k, n, accumulate);
}

}  // namespace k3::avx2
#pragma GCC pop_options
