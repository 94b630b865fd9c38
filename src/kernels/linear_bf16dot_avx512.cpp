// The opt-in bf16-activation path (Precision::kBf16, linear.h) for bf16 weights on CPUs with
// AVX512-BF16: activations are rounded to bf16 once, then vdpbf16ps multiplies 32 weight /
// activation pairs per instruction straight from the checkpoint's bf16 bytes (no widening).
//
// Per (row, token) there is one vector accumulator; lane j receives the pair sums of columns
// (2j, 2j+1), (2j+32, 2j+33), ... in order and the last partial step uses zeroed weights, so the
// result does not depend on n, the blocking or the row range (batch invariance holds within
// this precision too).  Blocking as in linear_gemm_avx512.cpp: blocks of kTok tokens x kRows
// rows, every 4-row x 6-token register tile over the whole row in one call (no accumulator
// leaves the registers), the weights read straight from the checkpoint, the activations
// packed by the caller (64-byte aligned, padded to whole 32-column steps plus one cache line
// against 4K aliasing).  Whole rows with the accumulators in registers avoid the loads and
// stores that column chunks with accumulators in memory would add around every chunk.
#include <algorithm>
#include <cstdint>
#include <utility>

#include "base/numeric_types.h"
#include "kernels/linear.h"
#include "kernels/matrix.h"

#include "kernels/simd/isa.h"
#define K3_ISA_LEVEL K3_ISA_AVX512BF16
#include "kernels/simd/isa_begin.h"

#include "kernels/gemm_walk.h"

namespace k3::avx512 {
namespace {

constexpr int64_t kRows = 8, kTok = 96;  // kRows % kR == 0
constexpr int kR = 4, kT = 6;

// y[t * ys + i] = W[i] . x[t] for R rows (at w + i * ws) and T tokens (at x + t * xs): `steps`
// whole 32-column steps, then `tail` columns.
template <int R, int T>
__attribute__((noinline)) void tile(const uint16_t* w, int64_t ws, const uint16_t* x, int64_t xs, int64_t steps,
                                    int64_t tail, float* y, int64_t ys) {
  __m512 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) acc[i][t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < steps; ++s) {
    __m512bh wv[R];
    for (int i = 0; i < R; ++i) wv[i] = (__m512bh)_mm512_loadu_si512(w + i * ws + s * 32);
    for (int t = 0; t < T; ++t) {
      const __m512bh xv = (__m512bh)_mm512_load_si512(x + t * xs + s * 32);
      for (int i = 0; i < R; ++i) acc[i][t] = _mm512_dpbf16_ps(acc[i][t], wv[i], xv);
    }
  }
  if (tail > 0) {  // the activations are zero-padded; the weights are loaded masked
    const __mmask32 m = static_cast<__mmask32>((uint64_t{1} << tail) - 1);
    __m512bh wv[R];
    for (int i = 0; i < R; ++i) wv[i] = (__m512bh)_mm512_maskz_loadu_epi16(m, w + i * ws + steps * 32);
    for (int t = 0; t < T; ++t) {
      const __m512bh xv = (__m512bh)_mm512_load_si512(x + t * xs + steps * 32);
      for (int i = 0; i < R; ++i) acc[i][t] = _mm512_dpbf16_ps(acc[i][t], wv[i], xv);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) y[t * ys + i] = _mm512_reduce_add_ps(acc[i][t]);
}

// Tokens [t, t + T) of the block against every row tile of rows [rb, rb + rn).
template <int T>
void row_tiles(const Matrix& m, const uint16_t* x, int64_t xs, float* y, int64_t rb, int64_t rn, int64_t t) {
  const uint16_t* base = static_cast<const uint16_t*>(m.data);
  const int64_t steps = m.cols / 32, tail = m.cols % 32;
  const uint16_t* xt = x + t * xs;
  float* yt = y + t * m.rows;
  int64_t i = 0;
  for (; i + kR <= rn; i += kR) tile<kR, T>(base + (rb + i) * m.cols, m.cols, xt, xs, steps, tail, yt + rb + i, m.rows);
  for (; i < rn; ++i) tile<1, T>(base + (rb + i) * m.cols, m.cols, xt, xs, steps, tail, yt + rb + i, m.rows);
}

}  // namespace

void linear_rows_bf16dot(const Matrix& m, const uint16_t* xb, int64_t xstride, int64_t n, float* y, int64_t r0,
                         int64_t r1) {
  for_each_gemm_tile<kTok, kRows, kT>(n, r0, r1, m.cols, m.cols,  // whole rows
                                      [&]<int T>(int64_t tb, int64_t rb, int64_t rn, int64_t t, int64_t, int64_t) {
                                        row_tiles<T>(m, xb + tb * xstride, xstride, y + tb * m.rows, rb, rn, t);
                                      });
}

}  // namespace k3::avx512

#include "kernels/simd/isa_end.h"
