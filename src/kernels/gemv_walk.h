// The decode GEMV's row walk shared by the AVX2 and AVX-512 builds (linear_avx2.cpp,
// linear_gemm_avx512.cpp; include it after the ISA pragma): rows go 4 at a time, one from each
// quarter of [r0, r1), so each of the 4 streams runs on through consecutive rows instead of
// restarting every few rows and the hardware prefetchers keep them going (Zen 5, AVX-512: ~56 ->
// ~70 GB/s; AVX2: 3-row tiles 22-31 -> 53-60 GB/s); the rows left over go one at a time.
#pragma once

#include <cstdint>

#include "kernels/matrix.h"

namespace k3::gemv_walk {

// rows.template operator()<R>(const W* const* rows, float* const* ys) for R = 4 and R = 1:
// ys[i] is where row rows[i]'s dot product goes (y + its row index).
template <typename W, class Rows>
inline void quarters(const Matrix& m, float* y, int64_t r0, int64_t r1, Rows&& run) {
  const W* base = static_cast<const W*>(m.data);
  const int64_t q = (r1 - r0) / 4;
  for (int64_t j = 0; j < q; ++j) {
    const int64_t r[4] = {r0 + j, r0 + q + j, r0 + 2 * q + j, r0 + 3 * q + j};
    const W* rows[4] = {base + r[0] * m.cols, base + r[1] * m.cols, base + r[2] * m.cols, base + r[3] * m.cols};
    float* ys[4] = {y + r[0], y + r[1], y + r[2], y + r[3]};
    run.template operator()<4>(rows, ys);
  }
  for (int64_t r = r0 + 4 * q; r < r1; ++r) {
    const W* row = base + r * m.cols;
    float* yr = y + r;
    run.template operator()<1>(&row, &yr);
  }
}

}  // namespace k3::gemv_walk
