// AVX-512 GEMM for dense (bf16 / fp32) weights and many tokens: the prefill path of linear().
//
// Blocking: the activations of a block of up to kTok tokens are packed once (column chunk by
// column chunk, tokens at stride kCols, 64-byte aligned: no split loads, no 4K aliasing) and
// reused by every row block.  For each block of kRows rows and each chunk of kCols columns the
// weights are widened to fp32 once into a packed panel, then a 4-row x 6-token register tile
// of 24 vector accumulators runs over it with no conversion in the inner loop (4 weight + 6
// activation loads per 24 FMAs; long chunks keep the per-call accumulator load/store small).
//
// Batch invariance (linear.h): each (row, token) accumulator receives exactly the FMA sequence
// of the GEMV path in linear_tiles.h -- lane j sums columns j, j+16, ... in order, the column
// tail is one step with zeroed weights and activations, and the horizontal sum is the same --
// so y[t, r] is bit-identical whichever path, n or row range computes it.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/numeric_types.h"
#include "kernels/linear.h"
#include "kernels/matrix.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")

namespace k3::avx512 {
namespace {

// An 8-row weight panel (16 KB) and a 6-token activation tile (12 KB) stay in L1 (48 KB on
// Sapphire Rapids and Zen 5) while the panel serves every token tile of the block; with the
// earlier 16 x 1024 panel (64 KB) the weights came from L2 on every tile.  Long token blocks
// make each weight panel's bf16 -> fp32 conversion (and its read from memory) serve 144
// tokens.  Zen 5, one thread, 1024 x 4096 x 256: 115-121 -> 131-140 GFLOP/s.
constexpr int64_t kRows = 8, kTok = 144, kCols = 512;  // kRows % 4 == 0, kTok % 6 == 0, kCols % 16 == 0
// Row blocks are walked in super-blocks of kSuper rows, column chunk by column chunk, so one
// chunk of the packed activations (kTok x kCols floats, 288 KB) stays in L2 across the
// kSuper / kRows row blocks that use it instead of being re-read from L3 per row block; the
// accumulators of a super-block (kSuper x kTok x 16 floats, 576 KB) live in L2 too (1 MB on
// Zen 5, 2 MB on Sapphire Rapids).  Zen 5, 2 threads, 7168 x 12288 x 256: 64 rows 1.11x 32.
constexpr int64_t kSuper = 64;  // a multiple of kRows
constexpr int kR = 4, kT = 6;

inline __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
inline __mmask16 tail_mask(int64_t k) { return static_cast<__mmask16>((1u << k) - 1u); }

// Packs rows [r, r + rn) x columns [c0, c1) as fp32, row stride kCols; the last partial vector
// is zero-filled (as the GEMV's masked tail loads are).
template <typename W>
void pack(const W* base, int64_t cols, int64_t r, int64_t rn, int64_t c0, int64_t c1, float* out) {
  for (int64_t i = 0; i < rn; ++i) {
    const W* src = base + (r + i) * cols;
    float* dst = out + i * kCols;
    int64_t c = c0;
    for (; c + 16 <= c1; c += 16) {
      if constexpr (sizeof(W) == 2)
        _mm512_storeu_ps(dst + (c - c0), widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + c))));
      else
        _mm512_storeu_ps(dst + (c - c0), _mm512_loadu_ps(src + c));
    }
    if (c < c1) {
      const __mmask16 m = tail_mask(c1 - c);
      if constexpr (sizeof(W) == 2)
        _mm512_storeu_ps(dst + (c - c0), widen(_mm256_maskz_loadu_epi16(m, src + c)));
      else
        _mm512_storeu_ps(dst + (c - c0), _mm512_maskz_loadu_ps(m, src + c));
    }
  }
}

// acc[i][t] += W[i] . x[t] over `steps` vectors of the packed panels (the zero-filled last
// vector is the GEMV's masked tail step); kFirst starts from zero instead (the first chunk), so
// the accumulators need no clearing pass.
template <int R, int T, bool kFirst>
__attribute__((noinline)) void micro(const float* w, const float* x, int64_t steps, float* acc_mem, int64_t as) {
  __m512 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) acc[i][t] = kFirst ? _mm512_setzero_ps() : _mm512_loadu_ps(acc_mem + (i * as + t) * 16);
  for (int64_t s = 0; s < steps; ++s) {
    __m512 wv[R];
    for (int i = 0; i < R; ++i) wv[i] = _mm512_loadu_ps(w + i * kCols + s * 16);
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_loadu_ps(x + t * kCols + s * 16);
      for (int i = 0; i < R; ++i) acc[i][t] = _mm512_fmadd_ps(wv[i], xv, acc[i][t]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(acc_mem + (i * as + t) * 16, acc[i][t]);
}

// One token tile (T tokens of the packed activations) against every row tile of the packed
// weight panel; panel and tile stay in L1 while the tile is reused kRows / 4 times.
template <int T, bool kFirst>
void row_tiles(const float* w, int64_t rn, const float* x, int64_t steps, float* acc, int64_t as) {
  int64_t i = 0;
  for (; i + kR <= rn; i += kR) micro<kR, T, kFirst>(w + i * kCols, x, steps, acc + i * as * 16, as);
  for (; i < rn; ++i) micro<1, T, kFirst>(w + i * kCols, x, steps, acc + i * as * 16, as);
}

// All token tiles of a block against one weight panel.
template <bool kFirst>
void token_tiles(const float* w, int64_t rn, const float* xk, int64_t tn, int64_t steps, float* ab, int64_t as) {
  int64_t t = 0;
  for (; t + kT <= tn; t += kT) row_tiles<kT, kFirst>(w, rn, xk + t * kCols, steps, ab + t * 16, as);
  const float* xt = xk + t * kCols;
  float* at = ab + t * 16;
  switch (tn - t) {
    case 5: row_tiles<5, kFirst>(w, rn, xt, steps, at, as); break;
    case 4: row_tiles<4, kFirst>(w, rn, xt, steps, at, as); break;
    case 3: row_tiles<3, kFirst>(w, rn, xt, steps, at, as); break;
    case 2: row_tiles<2, kFirst>(w, rn, xt, steps, at, as); break;
    case 1: row_tiles<1, kFirst>(w, rn, xt, steps, at, as); break;
    default: break;
  }
}

template <typename W>
void gemm(const Matrix& m, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  const W* base = static_cast<const W*>(m.data);
  const int64_t cols = m.cols, chunks = (cols + kCols - 1) / kCols;
  // Tokens per block: the weights stream from memory once per block, so blocks are long; the
  // packed activations (up to ~7 MB at 12288 columns) are re-read from L3 once per super-block.
  const int64_t tok = kTok;
  // One 64-byte-aligned scratch block per thread (unaligned 64-byte loads split cache lines).
  const size_t need = static_cast<size_t>(kRows * kCols + tok * chunks * kCols + kSuper * tok * 16 + 16);
  thread_local std::vector<float> scratch;
  if (scratch.size() < need) scratch.resize(need);
  float* const wpanel = scratch.data() + ((64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64) / 4;
  float* const xpack = wpanel + kRows * kCols;
  float* const acc = xpack + tok * chunks * kCols;
  for (int64_t tb = 0; tb < n; tb += tok) {
    const int64_t tn = std::min(tok, n - tb);
    for (int64_t k = 0; k < chunks; ++k)  // chunk k of every token, tokens at stride kCols
      pack(x + tb * cols, cols, 0, tn, k * kCols, std::min(cols, (k + 1) * kCols), xpack + k * tn * kCols);
    for (int64_t sb = r0; sb < r1; sb += kSuper) {
      const int64_t se = std::min(r1, sb + kSuper);
      // Per (row, token) the accumulator still receives chunk 0, 1, ... in order, each chunk's
      // steps in order: the same FMA sequence as the GEMV, whatever the blocking.
      for (int64_t k = 0; k < chunks; ++k) {
        const int64_t c0 = k * kCols, c1 = std::min(cols, c0 + kCols);
        const int64_t steps = (c1 - c0 + 15) / 16;
        const float* xk = xpack + k * tn * kCols;
        for (int64_t rb = sb; rb < se; rb += kRows) {
          const int64_t rn = std::min(kRows, se - rb);
          float* const ab = acc + (rb - sb) * tok * 16;
          pack(base, cols, rb, rn, c0, c1, wpanel);
          {  // the next panel's rows (the next row block, or this super-block's first in the next chunk)
            int64_t nr = rb + kRows, nc0 = c0, nc1 = c1;
            if (nr >= se) { nr = sb; nc0 = c1; nc1 = std::min(cols, c1 + kCols); }
            const int64_t nn = std::min(kRows, se - nr);
            if (nc0 < cols)
              for (int64_t i = 0; i < nn; ++i)
                for (int64_t c = nc0; c < nc1; c += 64 / static_cast<int64_t>(sizeof(W)))
                  _mm_prefetch(reinterpret_cast<const char*>(base + (nr + i) * cols + c), _MM_HINT_T1);
          }
          if (k == 0)
            token_tiles<true>(wpanel, rn, xk, tn, steps, ab, tok);
          else
            token_tiles<false>(wpanel, rn, xk, tn, steps, ab, tok);
        }
      }
      for (int64_t i = 0; i < se - sb; ++i)
        for (int64_t t = 0; t < tn; ++t)
          y[(tb + t) * m.rows + sb + i] = _mm512_reduce_add_ps(_mm512_loadu_ps(acc + (i * tok + t) * 16));
    }
  }
}

// Decode (one token): R whole rows per pass with accumulators in registers and a software
// prefetch along each row stream; the same per-row FMA sequence as every other dense path.
// The R rows come from R separate quarters of the row range (gemv), so each of the R streams
// runs on through consecutive rows instead of restarting every R rows: the hardware
// prefetchers keep long streams going (Zen 5: ~56 -> ~70 GB/s).
template <typename W, int R>
void gemv_rows(const W* const* rows, int64_t cols, const float* x, float* const* y) {
  constexpr int64_t kAhead = 1024 / sizeof(W);  // elements ahead (1 KB) for the prefetch
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    const __m512 xv = _mm512_loadu_ps(x + c);
    for (int i = 0; i < R; ++i) {
      const W* p = rows[i] + c;
      if (sizeof(W) == 4 || (c & 31) == 0) _mm_prefetch(reinterpret_cast<const char*>(p + kAhead), _MM_HINT_T0);
      __m512 wv;
      if constexpr (sizeof(W) == 2)
        wv = widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      else
        wv = _mm512_loadu_ps(p);
      acc[i] = _mm512_fmadd_ps(wv, xv, acc[i]);
    }
  }
  if (c < cols) {
    const __mmask16 m = tail_mask(cols - c);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + c);
    for (int i = 0; i < R; ++i) {
      __m512 wv;
      if constexpr (sizeof(W) == 2)
        wv = widen(_mm256_maskz_loadu_epi16(m, rows[i] + c));
      else
        wv = _mm512_maskz_loadu_ps(m, rows[i] + c);
      acc[i] = _mm512_fmadd_ps(wv, xv, acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) *y[i] = _mm512_reduce_add_ps(acc[i]);
}

template <typename W>
void gemv(const Matrix& m, const float* x, float* y, int64_t r0, int64_t r1) {
  const W* base = static_cast<const W*>(m.data);
  const int64_t q = (r1 - r0) / 4;
  for (int64_t j = 0; j < q; ++j) {
    const int64_t r[4] = {r0 + j, r0 + q + j, r0 + 2 * q + j, r0 + 3 * q + j};
    const W* rows[4] = {base + r[0] * m.cols, base + r[1] * m.cols, base + r[2] * m.cols, base + r[3] * m.cols};
    float* ys[4] = {y + r[0], y + r[1], y + r[2], y + r[3]};
    gemv_rows<W, 4>(rows, m.cols, x, ys);
  }
  for (int64_t r = r0 + 4 * q; r < r1; ++r) {
    const W* row = base + r * m.cols;
    float* yr = y + r;
    gemv_rows<W, 1>(&row, m.cols, x, &yr);
  }
}

}  // namespace

void linear_rows_gemv(const Matrix& m, const float* x, float* y, int64_t r0, int64_t r1) {
  if (m.format == WeightFormat::kBF16)
    gemv<uint16_t>(m, x, y, r0, r1);
  else
    gemv<float>(m, x, y, r0, r1);
}

void linear_rows_gemm(const Matrix& m, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  if (m.format == WeightFormat::kBF16)
    gemm<uint16_t>(m, x, n, y, r0, r1);
  else
    gemm<float>(m, x, n, y, r0, r1);
}

}  // namespace k3::avx512
#pragma GCC pop_options
