// The dense linear kernels (linear_tiles.h) and the small GEMM (small_gemm_tiles.h) over the
// level's vector type, compiled once per instruction-set level (kernels/simd/isa.h).  MXFP4
// weights go to each level's own kernel (linear_mxfp4_avx2.cpp, linear_mxfp4_avx512.cpp); on
// AVX-512 many tokens of dense rows run the GEMM of linear_gemm_avx512.cpp (chosen by linear.cpp).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "base/numeric_types.h"
#include "kernels/linear.h"
#include "kernels/matrix.h"
#include "kernels/small_gemm.h"

#include "kernels/simd/isa_begin.h"
#include "kernels/linear_tiles.h"
#include "kernels/small_gemm_tiles.h"

namespace k3::K3_ISA_NS {

void linear_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  if (w.format == WeightFormat::kMxfp4) {
    linear_rows_mxfp4(w, x, n, y, r0, r1);
    return;
  }
  tiles::Linear<Vec>::rows(w, x, n, y, r0, r1);
}

void gemm_nn(const float* A, const float* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate) {
  tiles::SmallGemm<Vec>::run(A, B, C, m, k, n, accumulate);
}
void gemm_nn(const float* A, const uint16_t* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate) {
  tiles::SmallGemm<Vec>::run(A, B, C, m, k, n, accumulate);
}

}  // namespace k3::K3_ISA_NS

#include "kernels/simd/isa_end.h"
