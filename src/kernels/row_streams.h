// The row walk of the bandwidth-bound products (decode GEMVs, few-token dense products, the AVX2
// MXFP4 GEMV), shared by the per-level builds; include it inside the instruction-set region
// (kernels/simd/isa_begin.h).  Rows go kR at a time, one from each kR-th of [r0, r1), so each of
// the kR streams runs on through consecutive rows instead of restarting every few rows, and the
// hardware prefetchers keep them going; the rows left over go one at a time.
#pragma once

#include <cstdint>

namespace k3::row_streams {

// run.template operator()<R>(const int64_t* rows) for R = kR * kPer and R = 1: rows[i] is the
// index of the tile's row i, kPer consecutive rows from each of the kR streams (stream i / kPer).
template <int kR, int kPer = 1, class Run>
inline void walk(int64_t r0, int64_t r1, Run&& run) {
  const int64_t q = (r1 - r0) / kR / kPer * kPer;  // rows per stream
  for (int64_t j = 0; j < q; j += kPer) {
    int64_t rows[kR * kPer];
    for (int i = 0; i < kR * kPer; ++i) rows[i] = r0 + (i / kPer) * q + j + i % kPer;
    run.template operator()<kR * kPer>(rows);
  }
  for (int64_t r = r0 + kR * q; r < r1; ++r) run.template operator()<1>(&r);
}

}  // namespace k3::row_streams
