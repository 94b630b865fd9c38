// The dense linear kernels over a vector type (kernels/simd/avx2.h, avx512.h), included by
// linear_isa.cpp and linear_mxfp4_avx2.cpp inside their instruction-set region:
//
//   decode and few tokens (bandwidth-bound): R rows x every token per tile, each row streamed
//     from memory once, the R rows from R long streams (stream_tile, row_streams.h);
//   more tokens (compute-bound, on AVX2; AVX-512 has its GEMM): for each block of rows x block
//     of tokens x block of columns (K), micro-tiles of R rows x T tokens (blocked).
//
// Both keep one vector accumulator per (row, token) in registers.
// Every (row, token) accumulator sees exactly the FMA sequence of a plain vector dot product
// (lane j sums columns j, j+L, j+2L, ... in order; one masked tail step; one fixed horizontal
// sum), whatever n, the blocking or the row range is.  That keeps y[t, r] independent of the
// batch, as linear.h promises.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/matrix.h"
#include "kernels/row_streams.h"

namespace k3::tiles {

template <class Tr>
struct Linear {
  using V = typename Tr::V;
  static constexpr int L = Tr::kLanes;
  // Dense: whole rows per tile call (a tile's accumulators stay in registers) and 96-token
  // blocks whose token tiles each serve a block of 4 row tiles while those rows stay in cache.
  static constexpr int64_t kDenseTB = 96, kDenseRB = 4 * Tr::kDenseRows, kWholeRows = int64_t{1} << 40;

  // ---- dense (f32 / bf16 weights) ----
  template <typename W, int R, int T>
  static inline void dense_tile(const W* const* w, const float* const* x, int64_t c0, int64_t c1, bool tail,
                                int64_t cols, float* acc_mem, int64_t acc_stride) {
    V acc[R][T];
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < T; ++t) acc[i][t] = Tr::load(acc_mem + (i * acc_stride + t) * L);
    int64_t c = c0;
    for (; c + L <= c1; c += L) {
      V wv[R];
      for (int i = 0; i < R; ++i) wv[i] = Tr::load_w(w[i] + c);
      for (int t = 0; t < T; ++t) {
        const V xv = Tr::load(x[t] + c);
        for (int i = 0; i < R; ++i) acc[i][t] = Tr::fma(wv[i], xv, acc[i][t]);
      }
    }
    if (tail && c < cols) {
      const int64_t k = cols - c;
      V wv[R];
      for (int i = 0; i < R; ++i) wv[i] = Tr::load_w_tail(w[i] + c, k);
      for (int t = 0; t < T; ++t) {
        const V xv = Tr::load_tail(x[t] + c, k);
        for (int i = 0; i < R; ++i) acc[i][t] = Tr::fma(wv[i], xv, acc[i][t]);
      }
    }
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < T; ++t) Tr::store(acc_mem + (i * acc_stride + t) * L, acc[i][t]);
  }

  // Runs rows [r0, r1) of y = W x for n tokens in blocks of kRB rows x kTB tokens, the columns
  // in chunks of kKC.  `tile` is a functor (rows..., tokens...) that dispatches the right
  // micro-kernel; R/T remainders use 1-row / 1-token tiles.  A block's token tiles run outside
  // its row tiles, so each token tile serves all the block's rows while the rows stay in cache.
  // prepare(rb, rn, kc, ke) runs before the tiles of each block's column chunk (the AVX2 MXFP4
  // kernel decodes the chunk's weights there).  The accumulators of a (row, token) pair live at
  // acc[(row * kTB + token) * L].
  template <int R, int T, int64_t kRB, int64_t kTB, int64_t kKC, class TileFn, class PrepareFn>
  static void blocked(int64_t rows_total, int64_t cols, const float* x, int64_t n, float* y, int64_t r0, int64_t r1,
                      TileFn&& tile, PrepareFn&& prepare) {
    thread_local std::vector<float> acc;
    acc.resize(static_cast<size_t>(kRB * kTB * L));
    for (int64_t rb = r0; rb < r1; rb += kRB) {
      const int64_t rn = std::min(kRB, r1 - rb);
      for (int64_t tb = 0; tb < n; tb += kTB) {
        const int64_t tn = std::min(kTB, n - tb);
        for (int64_t ri = 0; ri < rn; ++ri) std::fill_n(&acc[ri * kTB * L], tn * L, 0.0f);
        for (int64_t kc = 0; kc < cols; kc += kKC) {
          const int64_t ke = std::min(cols, kc + kKC);
          const bool last = ke == cols;
          const int64_t kfull = last ? ke - (ke - kc) % L : ke;  // full vectors end here
          prepare(rb, rn, kc, ke);
          // One register tile: rows [ri, ri + RR) x tokens [ti, ti + TT) of the block.
          auto run = [&]<int RR, int TT>(int64_t ri, int64_t ti) {
            tile.template operator()<RR, TT>(rb + ri, tb + ti, kc, kfull, last, &acc[(ri * kTB + ti) * L]);
          };
          const int64_t rfull = rn - rn % R, tfull = tn - tn % T;
          for (int64_t ti = 0; ti < tfull; ti += T) {
            for (int64_t ri = 0; ri < rfull; ri += R) run.template operator()<R, T>(ri, ti);
            for (int64_t ri = rfull; ri < rn; ++ri)
              for (int64_t t = ti; t < ti + T; ++t) run.template operator()<1, 1>(ri, t);
          }
          for (int64_t ti = tfull; ti < tn; ++ti) {
            for (int64_t ri = 0; ri < rfull; ri += R) run.template operator()<R, 1>(ri, ti);
            for (int64_t ri = rfull; ri < rn; ++ri) run.template operator()<1, 1>(ri, ti);
          }
        }
        for (int64_t ri = 0; ri < rn; ++ri)
          for (int64_t ti = 0; ti < tn; ++ti)
            y[(tb + ti) * rows_total + rb + ri] = Tr::reduce(Tr::load(&acc[(ri * kTB + ti) * L]));
      }
    }
  }

  template <typename W>
  static void dense(const Matrix& m, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
    const W* base = static_cast<const W*>(m.data);
    const int64_t cols = m.cols;
    blocked<Tr::kDenseRows, Tr::kDenseTokens, kDenseRB, kDenseTB, kWholeRows>(
        m.rows, cols, x, n, y, r0, r1,
        [&]<int R, int T>(int64_t r, int64_t t, int64_t c0, int64_t c1, bool last, float* acc) {
          const W* w[R];
          const float* xs[T];
          for (int i = 0; i < R; ++i) w[i] = base + (r + i) * cols;
          for (int j = 0; j < T; ++j) xs[j] = x + (t + j) * cols;
          dense_tile<W, R, T>(w, xs, c0, c1, last, cols, acc, kDenseTB);
        },
        [](int64_t, int64_t, int64_t, int64_t) {});
  }

  // ---- few tokens (1 <= n <= Tr::kStreamTokens): each row streamed from memory once ----
  // R rows x T tokens over every column, accumulators in registers, the R rows from R streams
  // (row_streams.h) with a software prefetch kAhead bytes ahead on each; y[t * rows_total + row].
  // Per (row, token) the FMA sequence, tail step and horizontal sum are dense_tile's.  With T = 1
  // this is the decode GEMV.  (The blocked walk above would read a block's rows from memory once
  // per token tile and restart its streams every few rows: few tokens are bandwidth-bound.)
  template <typename W, int R, int T>
  static void stream_tile(const W* base, int64_t cols, const int64_t* rows, const float* x, float* y,
                          int64_t rows_total) {
    constexpr int64_t kAhead = 1024 / sizeof(W);  // elements ahead (1 KB) for the prefetch
    const W* w[R];
    for (int i = 0; i < R; ++i) w[i] = base + rows[i] * cols;
    V acc[R][T];
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < T; ++t) acc[i][t] = Tr::zero();
    int64_t c = 0;
    for (; c + L <= cols; c += L) {
      V wv[R];
      for (int i = 0; i < R; ++i) {
        if (static_cast<int64_t>(c * sizeof(W)) % 64 == 0)
          _mm_prefetch(reinterpret_cast<const char*>(w[i] + c + kAhead), _MM_HINT_T0);
        wv[i] = Tr::load_w(w[i] + c);
      }
      for (int t = 0; t < T; ++t) {
        const V xv = Tr::load(x + t * cols + c);
        for (int i = 0; i < R; ++i) acc[i][t] = Tr::fma(wv[i], xv, acc[i][t]);
      }
    }
    if (c < cols) {
      const int64_t k = cols - c;
      V wv[R];
      for (int i = 0; i < R; ++i) wv[i] = Tr::load_w_tail(w[i] + c, k);
      for (int t = 0; t < T; ++t) {
        const V xv = Tr::load_tail(x + t * cols + c, k);
        for (int i = 0; i < R; ++i) acc[i][t] = Tr::fma(wv[i], xv, acc[i][t]);
      }
    }
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < T; ++t) y[t * rows_total + rows[i]] = Tr::reduce(acc[i][t]);
  }

  template <typename W, int T>
  static void streamed(const Matrix& m, const float* x, float* y, int64_t r0, int64_t r1) {
    const W* base = static_cast<const W*>(m.data);
    row_streams::walk<Tr::stream_rows(T)>(r0, r1, [&]<int R>(const int64_t* rows) {
      stream_tile<W, R, T>(base, m.cols, rows, x, y, m.rows);
    });
  }

  // Dense weights only: each ISA runs MXFP4 in its own kernel.  Up to Tr::kStreamMax tokens:
  // streamed passes of at most Tr::kStreamTokens tokens, as even as the count allows (6 = 3 + 3,
  // not 4 + 2); beyond, the blocked walk.
  static void rows(const Matrix& m, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
    if (n <= Tr::kStreamMax) {
      const int64_t passes = (n + Tr::kStreamTokens - 1) / Tr::kStreamTokens;
      for (int64_t p = 0, t0 = 0; p < passes; ++p) {
        const int64_t t1 = n * (p + 1) / passes;
        const int tn = static_cast<int>(t1 - t0);
        const float* xp = x + t0 * m.cols;
        float* yp = y + t0 * m.rows;
        [&]<int... Ts>(std::integer_sequence<int, Ts...>) {
          ((tn == Ts + 1 ? (m.format == WeightFormat::kBF16 ? streamed<uint16_t, Ts + 1>(m, xp, yp, r0, r1)
                                                            : streamed<float, Ts + 1>(m, xp, yp, r0, r1),
                            0)
                         : 0),
           ...);
        }(std::make_integer_sequence<int, Tr::kStreamTokens>{});
        t0 = t1;
      }
      return;
    }
    if (m.format == WeightFormat::kBF16) dense<uint16_t>(m, x, n, y, r0, r1);
    else dense<float>(m, x, n, y, r0, r1);
  }
};

}  // namespace k3::tiles
