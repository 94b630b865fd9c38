// AVX-512 GEMM for dense (bf16 / fp32) weights and many tokens: the prefill path of linear().
//
// Blocking: blocks of kTok tokens x kRows rows.  Every 6-row x 4-token register tile (24 vector
// accumulators) runs over the whole row in one call (rows wider than kMaxCols: over one column
// chunk, its accumulators parked in L1/L2 between chunks), with the weights widened in registers
// straight from the matrix (4 activation + 6 weight loads per 24 FMAs): no weight panel is
// written.  A block's rows (24 x cols, or a chunk of them; from memory once) stay in L2 while
// all its token tiles pass.  The activations arrive packed by the caller
// (64-byte aligned, stride gemm_x_stride(cols): padded by one cache line so the token rows do
// not alias in L1's sets; cols of 1024k or 7168 floats put every row at a multiple of 4 KB).
// Why this shape: widening the weights in registers beats copying them into a packed panel
// first, and holding the activations while each row's weights are loaded once per 16 columns
// (6 x 4) keeps full-width 512-bit FMA units (Zen 5) busy even from L1, where the transposed
// order (4 x 6, weights held, activations loaded per token) leaves a good part of them idle.
//
// Batch invariance (linear.h): each (row, token) accumulator receives exactly the FMA sequence
// of the few-token tiles and the decode GEMV (linear_tiles.h) -- lane j sums columns j, j+16,
// ... in order, the column tail is one step with zeroed weights and activations, and the
// horizontal sum is the same -- so y[t, r] is bit-identical whichever path, n or row range
// computes it.
#include <algorithm>
#include <cstdint>
#include <utility>

#include "base/aligned.h"
#include "base/numeric_types.h"
#include "kernels/linear.h"
#include "kernels/matrix.h"

#include "kernels/simd/isa.h"
#define K3_ISA_LEVEL K3_ISA_AVX512
#include "kernels/simd/isa_begin.h"

#include "kernels/gemm_walk.h"

namespace k3::avx512 {
namespace {

constexpr int64_t kRows = 24, kTok = 192;  // kRows % kR == 0
constexpr int kR = 6, kT = 4;
// Rows wider than this run in equal column chunks (multiples of 16) with the accumulators kept
// in L1/L2 between chunks, so a block's rows and a token tile's activations stay in L2.  Very
// wide rows (the dense MLP's down projection, 33792 columns) gain from chunking; rows up to
// about 12288 columns do as well or better whole, and much narrower chunks lose, so the limit
// sits at 8192.
constexpr int64_t kMaxCols = 8192;

inline __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
inline __mmask16 tail_mask(int64_t k) { return static_cast<__mmask16>((1u << k) - 1u); }

template <typename W>
inline __m512 load_w(const W* p) {
  if constexpr (sizeof(W) == 2)
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  else
    return _mm512_loadu_ps(p);
}
template <typename W>
inline __m512 load_w_tail(const W* p, __mmask16 m) {
  if constexpr (sizeof(W) == 2)
    return widen(_mm256_maskz_loadu_epi16(m, p));
  else
    return _mm512_maskz_loadu_ps(m, p);
}

// y[t * ys + i] = W[i] . x[t] for R rows (at w + i * ws) and T tokens (at x + t * xs), columns
// [c0, c1) of `cols` (c0 a multiple of 16; c1 too unless it is cols).  Per 16 columns: the T
// activation vectors are loaded once, then each row's weights are widened and meet all T of them
// (the x-stationary order: with 6 x 4 it keeps the FMA units nearer their peak in L1 than 4 x 6
// with the weights held does).  A row in several column chunks keeps its
// accumulators in acc_mem between them (row i, token t at (i * as + t) * 16): started from zero
// at c0 = 0, summed into y at c1 = cols; so each lane's FMA sequence is the whole-row one.
// pf: a row of the next token tile's activations, fetched into L2 over the same columns, one line
// per 16 columns (see row_tiles).
template <typename W, int R, int T>
__attribute__((noinline)) void tile(const W* w, int64_t ws, const float* x, int64_t xs, int64_t c0, int64_t c1,
                                    int64_t cols, float* y, int64_t ys, float* acc_mem, int64_t as, const float* pf) {
  __m512 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) acc[i][t] = c0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(acc_mem + (i * as + t) * 16);
  int64_t c = c0;
  for (; c + 16 <= c1; c += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(pf + c), _MM_HINT_T1);
    __m512 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm512_load_ps(x + t * xs + c);
    for (int i = 0; i < R; ++i) {
      const __m512 wv = load_w(w + i * ws + c);
      for (int t = 0; t < T; ++t) acc[i][t] = _mm512_fmadd_ps(wv, xv[t], acc[i][t]);
    }
  }
  if (c1 < cols) {
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < T; ++t) _mm512_store_ps(acc_mem + (i * as + t) * 16, acc[i][t]);
    return;
  }
  if (c < cols) {
    const __mmask16 m = tail_mask(cols - c);
    __m512 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm512_maskz_loadu_ps(m, x + t * xs + c);
    for (int i = 0; i < R; ++i) {
      const __m512 wv = load_w_tail(w + i * ws + c, m);
      for (int t = 0; t < T; ++t) acc[i][t] = _mm512_fmadd_ps(wv, xv[t], acc[i][t]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) y[t * ys + i] = _mm512_reduce_add_ps(acc[i][t]);
}

// Tokens [t, t + T) of the block at x / y against every row tile of rows [rb, rb + rn), columns
// [c0, c1): kR-row tiles, then one tile of the rows left over.  acc: the block's accumulators
// (row rb + i, token t at (i * kTok + t) * 16).  next: the first activation row of the token
// tile that runs after this one over the same columns (null: none).  The j-th row tile fetches
// that tile's row j % kT into L2 while it computes, so a token tile's activations (4 x 28 KB at
// 7168 columns, which the block's first row tile would otherwise wait for from L3) are there
// when it starts.  Fetching the next row block's weights the same way (at the start of a block,
// or a slice per tile) gains nothing, so it is not done.
template <typename W, int T>
void row_tiles(const Matrix& m, const float* x, int64_t xs, float* y, int64_t rb, int64_t rn, int64_t t, int64_t c0,
               int64_t c1, float* acc, const float* next) {
  const W* base = static_cast<const W*>(m.data);
  const float* xt = x + t * xs;
  float* yt = y + t * m.rows;
  int64_t i = 0;
  int j = 0;
  auto run = [&]<int R>() {
    const float* pf = next != nullptr ? next + (j % kT) * xs : xt;
    tile<W, R, T>(base + (rb + i) * m.cols, m.cols, xt, xs, c0, c1, m.cols, yt + rb + i, m.rows,
                  acc + (i * kTok + t) * 16, kTok, pf);
    ++j;
  };
  for (; i + kR <= rn; i += kR) run.template operator()<kR>();
  with_remainder<kR>(rn - i, run);
}

template <typename W>
void gemm(const Matrix& m, const float* x, int64_t xs, int64_t n, float* y, int64_t r0, int64_t r1) {
  const int64_t cols = m.cols, chunks = (cols + kMaxCols - 1) / kMaxCols;
  const int64_t step = chunks <= 1 ? cols : (cols / chunks + 15) / 16 * 16;
  thread_local AlignedVector<float> accbuf;
  accbuf.resize(static_cast<size_t>(kRows * kTok * 16));
  float* acc = accbuf.data();
  for_each_gemm_tile<kTok, kRows, kT>(
      n, r0, r1, cols, step, [&]<int T>(int64_t tb, int64_t rb, int64_t rn, int64_t t, int64_t c0, int64_t c1) {
        // The block's next token tile when it is a whole one (the walk's next tile, over the
        // same columns); not across to the next column chunk or row block (once per block).
        const int64_t tn = std::min(kTok, n - tb);
        const float* next = t + T + kT <= tn ? x + (tb + t + T) * xs : nullptr;
        row_tiles<W, T>(m, x + tb * xs, xs, y + tb * m.rows, rb, rn, t, c0, c1, acc, next);
      });
}

}  // namespace

int64_t gemm_x_stride(int64_t cols) { return (cols + 15) / 16 * 16 + 16; }

void linear_rows_gemm(const Matrix& m, const float* x, int64_t xstride, int64_t n, float* y, int64_t r0, int64_t r1) {
  if (m.format == WeightFormat::kBF16)
    gemm<uint16_t>(m, x, xstride, n, y, r0, r1);
  else
    gemm<float>(m, x, xstride, n, y, r0, r1);
}

}  // namespace k3::avx512

#include "kernels/simd/isa_end.h"
