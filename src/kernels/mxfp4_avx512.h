// What the two AVX-512 MXFP4 kernels share: per-lane E8M0 block scales and the batched walk over
// row blocks, token blocks and register tiles.  Include it after the ISA pragma, and every
// header it includes before the pragma (so no standard-library or k3 template is compiled for
// AVX-512 here and then picked by the linker for the whole program).
//
// Both MXFP4 kernels (linear_mxfp4_avx512.cpp: fp32 activations; linear_mxfp4_bf16dot_avx512.cpp:
// bf16 activations) order a 128-column block so that vector lane i only ever holds columns of
// the block's 32-group i / 4.  block_scales() turns the block's 4 scale bytes into that lane
// vector, 2^(scale[i / 4] - 127), with integer ops.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "base/aligned.h"
#include "kernels/gemm_walk.h"
#include "kernels/matrix.h"
#include "kernels/mxfp4.h"
#include "kernels/row_streams.h"

namespace k3::avx512 {

// Software prefetch distance along each row stream: about one 4-row block ahead at K3 expert
// widths (rows of 1.5-1.75 KB).  A distance of under one row leaves the kernel waiting on memory
// for cold experts; a block ahead keeps enough lines in flight.
constexpr int64_t kPrefetchBytes = 8192;

// A zero byte is the subnormal 2^-127, which the exponent shift cannot express; kZeros marks
// row blocks whose scales contain one (callers ask mxfp4_rows_have_zero_scale, mxfp4.h, once per
// block), so the common path carries no test.
template <bool kZeros>
inline __m512 block_scales(const uint8_t* s) {
  if constexpr (kZeros) {
    uint32_t u;
    std::memcpy(&u, s, 4);
    if (((u - 0x01010101u) & ~u & 0x80808080u) != 0) {
      alignas(64) float v[16];
      for (int i = 0; i < 16; ++i) v[i] = e8m0_to_f32(s[i / 4]);
      return _mm512_load_ps(v);
    }
  }
  // Rotate byte j of the broadcast word to bit 23 (left by 23 - 8j, mod 32), keep the exponent.
  const __m512i rot = _mm512_set_epi32(31, 31, 31, 31, 7, 7, 7, 7, 15, 15, 15, 15, 23, 23, 23, 23);
  int32_t word;
  std::memcpy(&word, s, 4);
  const __m512i b = _mm512_set1_epi32(word);
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_rolv_epi32(b, rot), _mm512_set1_epi32(0x7f800000)));
}

// Decode (one token) for both kernels, and T <= 3 tokens for the fp32 one: the row_streams.h
// walk, tiles of kStreams x kPer rows, kPer consecutive rows from each kStreams-th of the row
// range, so each stream runs on through consecutive rows (the prefetchers keep long streams
// going) instead of restarting every tile; then the rows left over one by one.
// run.template operator()<R, P, kZeros>(r, q, acc) runs the R rows r + (i / P) * q + i % P
// (i < R) over the whole row against the T tokens, writing their sums to acc (row i, token t at
// (i * T + t) * 16); y[t * rows + row] is the horizontal sum.
template <int kStreams, int kPer, int T = 1, class Run>
void gemv_rows(const Matrix& m, float* y, int64_t r0, int64_t r1, Run&& run) {
  alignas(64) float acc[kStreams * kPer * T * 16];
  row_streams::walk<kStreams, kPer>(r0, r1, [&]<int R>(const int64_t* rows) {
    constexpr int P = R == 1 ? 1 : kPer;
    const int64_t step = R == 1 ? 1 : rows[kPer] - rows[0];  // from one stream to the next
    bool zeros = false;
    for (int i = 0; i < R; i += P) zeros = zeros || mxfp4_rows_have_zero_scale(m, rows[i], P);
    if (zeros)
      run.template operator()<R, P, true>(rows[0], step, acc);
    else
      run.template operator()<R, P, false>(rows[0], step, acc);
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < T; ++t) y[t * m.rows + rows[i]] = _mm512_reduce_add_ps(_mm512_load_ps(acc + (i * T + t) * 16));
  });
}

// How batched_rows covers a block of rn rows x tn tokens with register tiles: tiles(rn, tn, run)
// calls run.template operator()<R, T>(ri, ti) for tiles of rows ri.. ri+R-1 x tokens ti.. ti+T-1.
// Both walks take whole expert rows (kColBlock 4096 >= 3072 / 3584 columns): each row streams on
// along itself and the accumulators of a tile meet each column once.  Narrower column blocks
// gain nothing: on Zen 4 1024-column blocks put the 8 KB row prefetch a block late, and on Zen 5
// 512 / 1024-column blocks with 8-24-token blocks (every activation slice in L1) do no better
// than whole rows.
//
// PairRowsWalk (the bf16 kernel): row pairs with 6, 4, 2, 1 tokens (two rows' decoded block
// serves 6 tokens), then an odd last row with 8, 4, 2, 1; 16-row blocks.
struct PairRowsWalk {
  static constexpr int64_t kRowBlock = 16, kTokBlock = 24, kColBlock = 4096;
  static constexpr bool kPrefetchNextBlock = false;
  template <class Run>
  static void tiles(int64_t rn, int64_t tn, Run&& run) {
    auto tokens = [&]<int R>(int64_t ri) {
      constexpr int kWide = R == 2 ? 6 : 8;
      int64_t ti = 0;
      for (; ti + kWide <= tn; ti += kWide) run.template operator()<R, kWide>(ri, ti);
      if (ti + 4 <= tn) run.template operator()<R, 4>(ri, ti), ti += 4;
      if (ti + 2 <= tn) run.template operator()<R, 2>(ri, ti), ti += 2;
      if (ti < tn) run.template operator()<R, 1>(ri, ti);
    };
    int64_t ri = 0;
    for (; ri + 2 <= rn; ri += 2) tokens.template operator()<2>(ri);
    for (; ri < rn; ++ri) tokens.template operator()<1>(ri);
  }
};

// TokensOuterWalk<kR> (the fp32 kernel): token tiles of 4 (the tokens left over as below) in the
// outer loop and tiles of kR rows (then one tile of the rows left over) in the inner one; 24-row
// blocks, and at the start of each block the next block's weight bytes are prefetched into L2
// (an expert's rows come from memory once; the walk's tile order is tuned with this burst, and
// spreading the same prefetches over the block's tiles gains nothing).
template <int kR>
struct TokensOuterWalk {
  static_assert(kR >= 1 && kR <= 8);
  static constexpr int64_t kRowBlock = 24, kTokBlock = 24, kColBlock = 4096;
  static constexpr bool kPrefetchNextBlock = true;
  template <class Run>
  static void tiles(int64_t rn, int64_t tn, Run&& run) {
    auto rows = [&]<int T>(int64_t ti) {
      int64_t ri = 0;
      for (; ri + kR <= rn; ri += kR) run.template operator()<kR, T>(ri, ti);
      with_remainder<kR>(rn - ri, [&]<int R>() { run.template operator()<R, T>(ri, ti); });
    };
    // Each tile decodes its rows' weights once, so the tokens left over take as few tiles as the
    // registers allow: 4k + 3 tokens end in a tile of 3 (not 2 + 1), 4k + 2 in one of 2, 4k + 1
    // (k >= 1) in 3 + 2 (not 4 + 1): fewer tiles means fewer decodes of the same weights.  A
    // 5-token tile would spill its accumulators, hence 3 + 2; 4k + 2 ends in 4 + 2 rather than
    // 3 + 3, since the wider tile uses the registers better.
    const int64_t whole = tn / 4 - (tn % 4 == 1 && tn >= 5 ? 1 : 0);
    int64_t ti = 0;
    for (int64_t q = 0; q < whole; ++q, ti += 4) rows.template operator()<4>(ti);
    switch (tn - ti) {
      case 5: rows.template operator()<3>(ti), rows.template operator()<2>(ti + 3); break;
      case 3: rows.template operator()<3>(ti); break;
      case 2: rows.template operator()<2>(ti); break;
      case 1: rows.template operator()<1>(ti); break;
      default: break;
    }
  }
};

// The batched path of both kernels (n >= 2 for the bf16 one, n >= 4 for the fp32 one, whose
// decode tiles take 2 and 3 tokens): blocks of Walk::kRowBlock rows x kTokBlock tokens,
// the columns in chunks of kColBlock (whole rows for n <= 2), every register tile of a chunk
// from Walk::tiles, then y[t, r] = the horizontal sum of (row, token)'s accumulator.
// run.template operator()<R, T, kZeros>(r, t, c0, c1, acc, acc_stride) runs one tile: rows
// r.. r+R-1, tokens t.. t+T-1, columns [c0, c1) (c0 a multiple of 128), accumulating into acc
// (row i, token j at (i * acc_stride + j) * 16), which it starts from zero when c0 = 0 (nothing
// zeroes acc here: that was a memset per block); kZeros: the row block has a zero scale byte.
template <class Walk, class Run>
void batched_rows(const Matrix& m, int64_t n, float* y, int64_t r0, int64_t r1, Run&& run) {
  constexpr int64_t kRowBlock = Walk::kRowBlock, kTokBlock = Walk::kTokBlock, kColBlock = Walk::kColBlock;
  const int64_t cols = m.cols, kc = n <= 2 ? cols : kColBlock;
  thread_local AlignedVector<float> accbuf;
  accbuf.resize(static_cast<size_t>(kRowBlock * kTokBlock * 16));
  float* acc = accbuf.data();
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const int64_t rn = std::min(kRowBlock, r1 - rb);
    if (Walk::kPrefetchNextBlock && rb + rn < r1) {
      const char* next = static_cast<const char*>(m.data) + (rb + rn) * (cols / 2);
      const int64_t bytes = std::min(kRowBlock, r1 - rb - rn) * (cols / 2);
      for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(next + b, _MM_HINT_T1);
    }
    const bool zeros = mxfp4_rows_have_zero_scale(m, rb, rn);
    for (int64_t tb = 0; tb < n; tb += kTokBlock) {
      const int64_t tn = std::min(kTokBlock, n - tb);
      for (int64_t c0 = 0; c0 < cols; c0 += kc) {
        const int64_t c1 = std::min(cols, c0 + kc);
        Walk::tiles(rn, tn, [&]<int R, int T>(int64_t ri, int64_t ti) {
          float* a = acc + (ri * kTokBlock + ti) * 16;
          if (zeros)
            run.template operator()<R, T, true>(rb + ri, tb + ti, c0, c1, a, kTokBlock);
          else
            run.template operator()<R, T, false>(rb + ri, tb + ti, c0, c1, a, kTokBlock);
        });
      }
      for (int64_t ri = 0; ri < rn; ++ri)
        for (int64_t ti = 0; ti < tn; ++ti)
          y[(tb + ti) * m.rows + rb + ri] = _mm512_reduce_add_ps(_mm512_loadu_ps(acc + (ri * kTokBlock + ti) * 16));
    }
  }
}

}  // namespace k3::avx512
