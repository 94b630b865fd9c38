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

// Tuned on Sapphire/Emerald Rapids (48 KB L1, 2 MB L2): a 4-row weight tile (16 KB) and a
// 6-token activation tile (24 KB) per micro-kernel call; the packed activations (~1 MB) in L2.
constexpr int64_t kRows = 16, kTok = 48, kCols = 1024;  // kRows % 4 == 0, kTok % 6 == 0, kCols % 16 == 0
// Row blocks are walked in super-blocks of kSuper rows, column chunk by column chunk, so one
// chunk of the packed activations (kTok x kCols floats, 192 KB) stays in L2 across the
// kSuper / kRows row blocks that use it instead of being re-read from L3 per row block (the
// whole packed block is ~2.4 MB at 12288 columns); the accumulators of a super-block
// (kSuper x kTok x 16 floats, 384 KB) live in L2 too.
constexpr int64_t kSuper = 128;  // a multiple of kRows
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
// vector is the GEMV's masked tail step).
template <int R, int T>
__attribute__((noinline)) void micro(const float* w, const float* x, int64_t steps, float* acc_mem, int64_t as) {
  __m512 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) acc[i][t] = _mm512_loadu_ps(acc_mem + (i * as + t) * 16);
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
template <int T>
void row_tiles(const float* w, int64_t rn, const float* x, int64_t steps, float* acc, int64_t as) {
  int64_t i = 0;
  for (; i + kR <= rn; i += kR) micro<kR, T>(w + i * kCols, x, steps, acc + i * as * 16, as);
  for (; i < rn; ++i) micro<1, T>(w + i * kCols, x, steps, acc + i * as * 16, as);
}

template <typename W>
void gemm(const Matrix& m, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  const W* base = static_cast<const W*>(m.data);
  const int64_t cols = m.cols, chunks = (cols + kCols - 1) / kCols;
  // Tokens per block: the weights stream from memory once per block, so blocks are long; the
  // packed activations (up to ~2.4 MB at 12288 columns) are re-read from L2/L3 per row block.
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
      std::fill_n(acc, (se - sb) * tok * 16, 0.0f);
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
          int64_t t = 0;
          for (; t + kT <= tn; t += kT) row_tiles<kT>(wpanel, rn, xk + t * kCols, steps, ab + t * 16, tok);
          const float* xt = xk + t * kCols;
          float* at = ab + t * 16;
          switch (tn - t) {
            case 5: row_tiles<5>(wpanel, rn, xt, steps, at, tok); break;
            case 4: row_tiles<4>(wpanel, rn, xt, steps, at, tok); break;
            case 3: row_tiles<3>(wpanel, rn, xt, steps, at, tok); break;
            case 2: row_tiles<2>(wpanel, rn, xt, steps, at, tok); break;
            case 1: row_tiles<1>(wpanel, rn, xt, steps, at, tok); break;
            default: break;
          }
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
template <typename W, int R>
void gemv_rows(const W* w0, int64_t cols, const float* x, float* y) {
  constexpr int64_t kAhead = 1024 / sizeof(W);  // elements ahead (1 KB) for the prefetch
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    const __m512 xv = _mm512_loadu_ps(x + c);
    for (int i = 0; i < R; ++i) {
      const W* p = w0 + i * cols + c;
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
        wv = widen(_mm256_maskz_loadu_epi16(m, w0 + i * cols + c));
      else
        wv = _mm512_maskz_loadu_ps(m, w0 + i * cols + c);
      acc[i] = _mm512_fmadd_ps(wv, xv, acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) y[i] = _mm512_reduce_add_ps(acc[i]);
}

template <typename W>
void gemv(const Matrix& m, const float* x, float* y, int64_t r0, int64_t r1) {
  const W* base = static_cast<const W*>(m.data);
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) gemv_rows<W, 4>(base + r * m.cols, m.cols, x, y + r);
  for (; r < r1; ++r) gemv_rows<W, 1>(base + r * m.cols, m.cols, x, y + r);
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
