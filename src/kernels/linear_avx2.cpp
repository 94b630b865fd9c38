// The AVX2/FMA dense linear kernel (linear_tiles.h) and small GEMM (small_gemm_tiles.h), for CPUs
// without AVX-512; MXFP4 weights go to linear_mxfp4_avx2.cpp.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/numeric_types.h"
#include "kernels/linear.h"
#include "kernels/matrix.h"
#include "kernels/small_gemm.h"

// Everything below is compiled for this instruction set; the headers above (standard library
// included) keep the baseline target, so no shared inline code ever carries these instructions.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "kernels/gemv_walk.h"
#include "kernels/linear_avx2_traits.h"
#include "kernels/linear_tiles.h"
#include "kernels/small_gemm_tiles.h"

namespace k3::avx2 {
namespace {

// Decode (one token) of dense rows: R rows at a time, each from its own quarter of the row range
// (gemv_walk.h), so each stream runs on through consecutive rows instead of restarting every few
// rows (as the blocked tiles' 3-row tiles do), with a software prefetch 1 KB ahead on each.  Each row's
// FMA sequence, tail step and horizontal sum are dense_tile's (linear_tiles.h), so a row's value
// is the same bits as in a batch.  Zen 5, K3_ISA=avx2, k3 bench, 2 threads: 12288 x 7168 /
// 7168 x 12288 bf16 from 21.7 / 30.9 GB/s (33% / 47% of the read probe) with the 3 x 1 tiles to
// 59.3 / 54.0 GB/s (93% / 85%).
template <typename W, int R>
void gemv_rows(const W* const* rows, int64_t cols, const float* x, float* const* y) {
  constexpr int64_t kAhead = 1024 / sizeof(W);  // elements ahead (1 KB) for the prefetch
  constexpr int L = Traits::kLanes;
  __m256 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = Traits::zero();
  int64_t c = 0;
  for (; c + L <= cols; c += L) {
    const __m256 xv = Traits::load(x + c);
    for (int i = 0; i < R; ++i) {
      const W* p = rows[i] + c;
      if (static_cast<int64_t>(c * sizeof(W)) % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(p + kAhead), _MM_HINT_T0);
      acc[i] = Traits::fma(Traits::load_w(p), xv, acc[i]);
    }
  }
  if (c < cols) {
    const __m256 xv = Traits::load_tail(x + c, cols - c);
    for (int i = 0; i < R; ++i) acc[i] = Traits::fma(Traits::load_w_tail(rows[i] + c, cols - c), xv, acc[i]);
  }
  for (int i = 0; i < R; ++i) *y[i] = Traits::reduce(acc[i]);
}

template <typename W>
void gemv(const Matrix& m, const float* x, float* y, int64_t r0, int64_t r1) {
  gemv_walk::quarters<W>(m, y, r0, r1, [&]<int R>(const W* const* rows, float* const* ys) {
    gemv_rows<W, R>(rows, m.cols, x, ys);
  });
}

}  // namespace

void linear_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  if (w.format == WeightFormat::kMxfp4) {
    linear_rows_mxfp4(w, x, n, y, r0, r1);
    return;
  }
  if (n == 1) {
    if (w.format == WeightFormat::kBF16) gemv<uint16_t>(w, x, y, r0, r1);
    else gemv<float>(w, x, y, r0, r1);
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
