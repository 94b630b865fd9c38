// The block walk the AVX-512 whole-row GEMMs share (linear_gemm_avx512.cpp: fp32 math;
// linear_bf16dot_avx512.cpp: bf16 dot products): blocks of kTok tokens x kRows rows (and
// optionally column chunks); in each, token tiles of kT tokens and then one tile of the tokens
// left over, every tile against all the block's rows.  A block's rows stay in L2 while its token tiles pass.  with_remainder (also
// used by the MXFP4 walks in mxfp4_avx512.h) turns a row or token remainder into the size of
// one last register tile.  Include after the
// ISA pragma (the callbacks are compiled for it), and the headers it includes before it (so no
// standard-library template is compiled for AVX-512 here and picked by the linker elsewhere).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

namespace k3::avx512 {

// Calls f.template operator()<K>() for K == k when 1 <= k < kMax (else nothing): a run-time
// remainder of rows or tokens becomes the compile-time size of one last register tile.
template <int kMax, class F>
inline void with_remainder(int64_t k, F&& f) {
  [&]<int... Ks>(std::integer_sequence<int, Ks...>) {
    ((k == Ks + 1 ? (f.template operator()<Ks + 1>(), 0) : 0), ...);
  }(std::make_integer_sequence<int, kMax - 1>{});
}

// run.template operator()<T>(tb, rb, rn, t, c0, c1): tokens tb + t .. tb + t + T - 1 against
// rows [rb, rb + rn), columns [c0, c1); T is kT, or 1 .. kT - 1 for the block's last tile.  The
// columns come whole (col_step >= cols) or in chunks of col_step, all of a block's tiles over
// one chunk before the next.
template <int64_t kTok, int64_t kRows, int kT, class Run>
void for_each_gemm_tile(int64_t n, int64_t r0, int64_t r1, int64_t cols, int64_t col_step, Run&& run) {
  static_assert(kT >= 1);
  for (int64_t tb = 0; tb < n; tb += kTok) {
    const int64_t tn = std::min(kTok, n - tb);
    for (int64_t rb = r0; rb < r1; rb += kRows) {
      const int64_t rn = std::min(kRows, r1 - rb);
      for (int64_t c0 = 0; c0 < cols; c0 += col_step) {
        const int64_t c1 = std::min(cols, c0 + col_step);
        int64_t t = 0;
        for (; t + kT <= tn; t += kT) run.template operator()<kT>(tb, rb, rn, t, c0, c1);
        with_remainder<kT>(tn - t, [&]<int T>() { run.template operator()<T>(tb, rb, rn, t, c0, c1); });
      }
    }
  }
}

}  // namespace k3::avx512
