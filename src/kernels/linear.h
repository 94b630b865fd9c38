// Matrix-vector / matrix-matrix products over fp32, bf16 and MXFP4 weights with fp32 math:
//   y[t, r] = sum_c W[r, c] * x[t, c]      for t < n tokens, r < rows
// x is [n, cols] and y is [n, rows], both contiguous fp32.  Weights are widened/decoded in
// registers, never materialised.
//
// Contract for every implementation: the value of y[t, r] depends only on row r and x[t], never
// on n, on the row range, or on the other tokens, so a sequence gets bit-identical results
// whether it runs alone or inside a continuous batch.
#pragma once

#include <cstdint>

#include "kernels/matrix.h"

namespace k3 {

// Dispatches on active_isa().
void linear(const Matrix& w, const float* x, int64_t n, float* y);
// Only rows [r0, r1) of y are written (for partitioning across threads).
void linear_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);

// y[t, c] = sum_r W[r, c] * x[t, r] for t < n  (the transposed product; absorbs MLA's kv_b into q).
void linear_transposed(const Matrix& w, const float* x, int64_t n, float* y);

// Plain, obviously-correct versions the tests compare against.
namespace ref {
void linear_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);
void linear_transposed(const Matrix& w, const float* x, float* y);
// Widens / decodes row r into out[cols].
void dequant_row(const Matrix& w, int64_t r, float* out);
}  // namespace ref

namespace avx2 {
void linear_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);
}
namespace avx512 {
void linear_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);
// MXFP4 rows; x in the wide order (mxfp4_shuffle_activations_wide).
void linear_rows_mxfp4(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);
// Dense (f32 / bf16) rows for many tokens: packed, register-blocked GEMM, same sums as the GEMV.
void linear_rows_gemm(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);
// Dense rows for one token (decode).
void linear_rows_gemv(const Matrix& w, const float* x, float* y, int64_t r0, int64_t r1);
}

// MXFP4 kernels read x in a per-32-column "even then odd" order, so packed nibbles need no
// interleaving in registers: xs[g*32 + j] = x[g*32 + 2j], xs[g*32 + 16 + j] = x[g*32 + 2j + 1].
void mxfp4_shuffle_activations(const float* x, int64_t cols, float* xs);
// The AVX-512 order: each full 128-column block b is stored as 8 runs of 16,
// xs[b*128 + 16k + i] = x[b*128 + 8i + k]; the trailing cols % 128 use the per-32 order above.
void mxfp4_shuffle_activations_wide(const float* x, int64_t cols, float* xs);

}  // namespace k3
