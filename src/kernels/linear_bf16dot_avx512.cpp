// The opt-in bf16-activation path (Precision::kBf16, linear.h) for bf16 weights on CPUs with
// AVX512-BF16: activations are rounded to bf16 once, then vdpbf16ps multiplies 32 weight /
// activation pairs per instruction straight from the checkpoint's bf16 bytes (no widening).
//
// Per (row, token) there is one vector accumulator; lane j receives the pair sums of columns
// (2j, 2j+1), (2j+32, 2j+33), ... in order and the last partial step uses zeroed weights, so the
// result does not depend on n, the blocking or the row range (batch invariance holds within
// this precision too).  Blocking as in linear_gemm_avx512.cpp: the bf16 activations of a block
// of tokens are packed once (64-byte aligned, padded to whole 32-column steps), the weights are
// read in 4-row x kCols tiles that stay in L1 while 6-token tiles stream past them.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/numeric_types.h"
#include "kernels/linear.h"
#include "kernels/matrix.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")

namespace k3::avx512 {
namespace {

constexpr int64_t kCols = 1024;  // columns per chunk (a multiple of 32)
constexpr int64_t kRows = 8;
constexpr int kR = 4, kT = 6;

template <int R, int T>
__attribute__((noinline)) void micro(const uint16_t* w, int64_t ws, const uint16_t* x, int64_t xs, int64_t steps,
                                     int64_t tail, float* acc_mem, int64_t as) {
  __m512 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) acc[i][t] = _mm512_loadu_ps(acc_mem + (i * as + t) * 16);
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
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(acc_mem + (i * as + t) * 16, acc[i][t]);
}

struct Ctx {
  const uint16_t* w;  // weights of the current row block at chunk start
  int64_t ws;         // weight row stride (cols)
  const uint16_t* x;  // packed activations of the chunk
  int64_t xs;         // packed activation stride (padded cols)
  int64_t steps, tail;
  float* acc;
  int64_t as;  // accumulator token stride
};

template <int T>
void row_tiles(const Ctx& c, int64_t rn, int64_t t) {
  int64_t i = 0;
  for (; i + kR <= rn; i += kR)
    micro<kR, T>(c.w + i * c.ws, c.ws, c.x + t * c.xs, c.xs, c.steps, c.tail, c.acc + (i * c.as + t) * 16, c.as);
  for (; i < rn; ++i)
    micro<1, T>(c.w + i * c.ws, c.ws, c.x + t * c.xs, c.xs, c.steps, c.tail, c.acc + (i * c.as + t) * 16, c.as);
}

}  // namespace

void linear_rows_bf16dot(const Matrix& m, const uint16_t* xb, int64_t xstride, int64_t n, float* y, int64_t r0,
                         int64_t r1) {
  const uint16_t* base = static_cast<const uint16_t*>(m.data);
  const int64_t cols = m.cols;
  const int64_t tok = std::min<int64_t>(n, 48);
  thread_local std::vector<float> accbuf;
  accbuf.resize(static_cast<size_t>(kRows * tok * 16));
  float* acc = accbuf.data();
  for (int64_t tb = 0; tb < n; tb += tok) {
    const int64_t tn = std::min(tok, n - tb);
    for (int64_t rb = r0; rb < r1; rb += kRows) {
      const int64_t rn = std::min(kRows, r1 - rb);
      for (int64_t i = 0; i < rn; ++i) std::fill_n(acc + i * tok * 16, tn * 16, 0.0f);
      for (int64_t c0 = 0; c0 < cols; c0 += kCols) {
        const int64_t c1 = std::min(cols, c0 + kCols);
        const Ctx c{base + rb * cols + c0, cols, xb + tb * xstride + c0, xstride, (c1 - c0) / 32, (c1 - c0) % 32, acc, tok};
        int64_t t = 0;
        for (; t + kT <= tn; t += kT) row_tiles<kT>(c, rn, t);
        switch (tn - t) {
          case 5: row_tiles<5>(c, rn, t); break;
          case 4: row_tiles<4>(c, rn, t); break;
          case 3: row_tiles<3>(c, rn, t); break;
          case 2: row_tiles<2>(c, rn, t); break;
          case 1: row_tiles<1>(c, rn, t); break;
          default: break;
        }
      }
      for (int64_t i = 0; i < rn; ++i)
        for (int64_t t = 0; t < tn; ++t)
          y[(tb + t) * m.rows + rb + i] = _mm512_reduce_add_ps(_mm512_loadu_ps(acc + (i * tok + t) * 16));
    }
  }
}

}  // namespace k3::avx512
#pragma GCC pop_options
