// AVX-512 MXFP4 linear kernel (decode GEMV and the small-batch expert products).
//
// Activations come in the "wide" order of mxfp4_shuffle_activations_wide (linear.h): in every
// full 128-column block, vector k (k < 8) lane i holds column 8i + k, which is exactly the
// nibble that a 4k-bit right shift of the 64 packed bytes leaves in the low 4 bits of 32-bit
// lane i.  vpermps only reads those 4 bits, so decoding 16 weights costs one shift and one
// table permute, with no masking or widening.  Lane i of a block belongs to 32-group i / 4, so
// the 4 E8M0 scales of a block become one per-lane scale vector built with integer ops.
//
// Per (row, token) the arithmetic is fixed, whatever n, the tiling or the row range:
//   per 128-block:      p = w0*x0; p = fma(wk, xk, p) for k = 1..7;  acc = fma(p, s, acc)
//   per trailing group: p = w_even*x_even; p = fma(w_odd, x_odd, p);  acc = fma(p, s, acc)
//   y = horizontal sum of acc (the same reduction everywhere)
// so every token's result is bit-identical whether it runs alone or in a batch.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "base/aligned.h"
#include "kernels/linear.h"
#include "kernels/matrix.h"
#include "kernels/mxfp4.h"

#include "kernels/simd/isa.h"
#define K3_ISA_LEVEL K3_ISA_AVX512
#include "kernels/simd/isa_begin.h"

#include "kernels/mxfp4_avx512.h"

namespace k3::avx512 {
namespace {

constexpr int kGemmRows = 4;  // rows of the batched register tile (gemm_tile; 4 tokens, mxfp4_avx512.h)
// Decode tiles: 4 consecutive rows from each half of a thread's rows (gemv_rows), so 8 rows
// share each activation load and only 2 streams per core go to memory.  More streams per core
// or fewer rows per tile read memory no faster, and tiles of 12 rows or more push the
// accumulators out of the registers, which costs far more than it saves.
constexpr int kGemvStreams = 2, kGemvRowsPerStream = 4;
// Up to this many tokens the decode tiles take every token (gemv below), 2 x 2 rows for 2 or 3
// tokens; from 4 on (where that tile spills), the batched activation-stationary tiles.  For 2 or
// 3 tokens, reading each expert row once for all tokens clearly beats the batched walk; at 4
// tokens the decode tiles no longer win.
constexpr int64_t kStreamTokens = 3;

// Decode and few tokens: R rows against T tokens' activations (token t at x + t * cols) over
// all `cols` columns, their sums into acc_mem (row i, token t at (i * T + t) * 16).  Row i is
// row (i / P) * step + i % P from the first (packed bytes from w0, scales from s0).  Each row is
// decoded once for all T tokens, and every stream is read once (the batched walk below re-reads
// a block's rows for each token tile and restarts its streams every block).
template <int R, int P, bool kZeros, int T = 1>
__attribute__((noinline)) void gemv_tile(const uint8_t* w0, const uint8_t* s0, int64_t step, const float* x,
                                         int64_t cols, int64_t full, float* acc_mem) {
  const uint8_t* w[R];
  const uint8_t* s[R];
  for (int i = 0; i < R; ++i) {
    const int64_t row = (i / P) * step + i % P;
    w[i] = w0 + row * (cols / 2), s[i] = s0 + row * (cols / 32);
  }
  const __m512 lut = _mm512_loadu_ps(kE2M1Values);
  __m512 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) acc[i][t] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c < full; c += 128) {
    __m512i raw[R];
    for (int i = 0; i < R; ++i) {
      const uint8_t* p = w[i] + c / 2;
      _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes), _MM_HINT_T0);
      raw[i] = _mm512_loadu_si512(p);
    }
    __m512 p[R][T];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      __m512 xk[T];
      for (int t = 0; t < T; ++t) xk[t] = _mm512_loadu_ps(x + t * cols + c + 16 * k);
      for (int i = 0; i < R; ++i) {
        const __m512 wk = _mm512_permutexvar_ps(_mm512_srli_epi32(raw[i], 4 * k), lut);
        for (int t = 0; t < T; ++t) p[i][t] = k == 0 ? _mm512_mul_ps(wk, xk[t]) : _mm512_fmadd_ps(wk, xk[t], p[i][t]);
      }
    }
    for (int i = 0; i < R; ++i) {
      const __m512 sv = block_scales<kZeros>(s[i] + c / 32);
      for (int t = 0; t < T; ++t) acc[i][t] = _mm512_fmadd_ps(p[i][t], sv, acc[i][t]);
    }
  }
  for (; c < cols; c += 32) {  // trailing 32-groups (cols % 128), even/odd activation order
    __m512 xe[T], xo[T];
    for (int t = 0; t < T; ++t) xe[t] = _mm512_loadu_ps(x + t * cols + c), xo[t] = _mm512_loadu_ps(x + t * cols + c + 16);
    for (int i = 0; i < R; ++i) {
      const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i] + c / 2)));
      const __m512 lo = _mm512_permutexvar_ps(b, lut), hi = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), lut);
      const __m512 sv = _mm512_set1_ps(e8m0_to_f32(s[i][c / 32]));
      for (int t = 0; t < T; ++t) acc[i][t] = _mm512_fmadd_ps(_mm512_fmadd_ps(hi, xo[t], _mm512_mul_ps(lo, xe[t])), sv, acc[i][t]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(acc_mem + (i * T + t) * 16, acc[i][t]);
}

// The batched tile (n > kStreamTokens): the same per-(row, token) arithmetic as gemv_tile(), in the
// activation-stationary order: per 16 columns the T activation vectors are loaded once and each
// of the R rows' decoded weights meets all of them; the 128-block partial sums p stay in
// registers and the accumulators wait in acc_mem (L1) between blocks.  This order beats a
// weight-stationary tile with accumulators in registers (2 x 6, one activation load per 2 FMAs),
// whose activation loads limit it.  6 x 4 spills the partial sums; 8 x 2 and 3 x 6 do no better
// than 4 x 4.
template <int R, int T, bool kZeros>
__attribute__((noinline)) void gemm_tile(const uint8_t* w0, int64_t ws, const uint8_t* s0, int64_t ss,
                                         const float* x0, int64_t xs, int64_t c0, int64_t c1, int64_t full,
                                         float* acc_mem, int64_t acc_stride) {
  const uint8_t* w[R];
  const uint8_t* s[R];
  const float* x[T];
  for (int i = 0; i < R; ++i) w[i] = w0 + i * ws, s[i] = s0 + i * ss;
  for (int t = 0; t < T; ++t) x[t] = x0 + t * xs;
  const __m512 lut = _mm512_loadu_ps(kE2M1Values);
  // acc = fma(p, s, acc); at column 0 acc_mem is not yet written and acc starts from +0.
  auto accumulate = [&](int i, __m512 sv, const __m512* p, bool first) {
    for (int t = 0; t < T; ++t) {
      float* a = acc_mem + (i * acc_stride + t) * 16;
      _mm512_storeu_ps(a, _mm512_fmadd_ps(p[t], sv, first ? _mm512_setzero_ps() : _mm512_loadu_ps(a)));
    }
  };
  int64_t c = c0;
  const int64_t cf = std::min(c1, full);
  for (; c < cf; c += 128) {
    __m512 p[R][T];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      __m512 xk[T];
      for (int t = 0; t < T; ++t) xk[t] = _mm512_loadu_ps(x[t] + c + 16 * k);
      for (int i = 0; i < R; ++i) {
        const __m512i raw = _mm512_loadu_si512(w[i] + c / 2);  // from L1 after k = 0
        const __m512 wk = _mm512_permutexvar_ps(k == 0 ? raw : _mm512_srli_epi32(raw, 4 * k), lut);
        for (int t = 0; t < T; ++t) p[i][t] = k == 0 ? _mm512_mul_ps(wk, xk[t]) : _mm512_fmadd_ps(wk, xk[t], p[i][t]);
      }
    }
    for (int i = 0; i < R; ++i) accumulate(i, block_scales<kZeros>(s[i] + c / 32), p[i], c == 0);
  }
  for (; c < c1; c += 32) {  // trailing 32-groups (cols % 128), even/odd activation order
    __m512 xe[T], xo[T];
    for (int t = 0; t < T; ++t) xe[t] = _mm512_loadu_ps(x[t] + c), xo[t] = _mm512_loadu_ps(x[t] + c + 16);
    for (int i = 0; i < R; ++i) {
      const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i] + c / 2)));
      const __m512 lo = _mm512_permutexvar_ps(b, lut), hi = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), lut);
      __m512 p[T];
      for (int t = 0; t < T; ++t) p[t] = _mm512_fmadd_ps(hi, xo[t], _mm512_mul_ps(lo, xe[t]));
      accumulate(i, _mm512_set1_ps(e8m0_to_f32(s[i][c / 32])), p, c == 0);
    }
  }
}

// Decode and up to kStreamTokens tokens: every row over all its columns (gemv_rows in
// mxfp4_avx512.h).  Registers: R x T partial sums and accumulators, R packed blocks, T
// activations and the table (2 x 2 rows x 3 tokens: 12 + 12 + 4 + 3 + 1 = 32 before the decode
// temporaries, so that tile spills a little; reading each row once still makes it much faster
// than the batched tiles for so few tokens).
template <int T>
void gemv(const Matrix& m, const float* xs, float* y, int64_t r0, int64_t r1) {
  constexpr int kStreams = kGemvStreams, kPer = T == 1 ? kGemvRowsPerStream : 2;
  const uint8_t* pk = static_cast<const uint8_t*>(m.data);
  const int64_t cols = m.cols, full = cols / 128 * 128;
  gemv_rows<kStreams, kPer, T>(m, y, r0, r1, [&]<int R, int P, bool kZeros>(int64_t r, int64_t q, float* acc) {
    gemv_tile<R, P, kZeros, T>(pk + r * (cols / 2), m.scales + r * (cols / 32), q, xs, cols, full, acc);
  });
}

}  // namespace

void linear_rows_mxfp4(const Matrix& m, const float* xs, int64_t n, float* y, int64_t r0, int64_t r1) {
  if (n <= kStreamTokens) {
    switch (n) {
      case 1: gemv<1>(m, xs, y, r0, r1); return;
      case 2: gemv<2>(m, xs, y, r0, r1); return;
      default: gemv<3>(m, xs, y, r0, r1); return;
    }
  }
  const uint8_t* pk = static_cast<const uint8_t*>(m.data);
  const int64_t cols = m.cols, full = cols / 128 * 128;
  batched_rows<TokensOuterWalk<kGemmRows>>(
      m, n, y, r0, r1, [&]<int R, int T, bool kZeros>(int64_t r, int64_t t, int64_t c0, int64_t c1, float* acc, int64_t as) {
        gemm_tile<R, T, kZeros>(pk + r * (cols / 2), cols / 2, m.scales + r * (cols / 32), cols / 32, xs + t * cols,
                                    cols, c0, c1, full, acc, as);
               });
}

}  // namespace k3::avx512

#include "kernels/simd/isa_end.h"
