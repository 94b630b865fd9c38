// Matrix-vector / matrix-matrix products over fp32, bf16 and MXFP4 weights with fp32 math:
//   y[t, r] = sum_c W[r, c] * x[t, c]      for t < n tokens, r < rows
// x is [n, cols] and y is [n, rows], both contiguous fp32.  Weights are widened/decoded in
// registers, never materialised whole.
//
// Contract for every implementation: the value of y[t, r] depends only on row r and x[t], never
// on n, on the row range, or on the other tokens, so a sequence gets bit-identical results
// whether it runs alone or inside a continuous batch.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kernels/matrix.h"

namespace k3 {

// Arithmetic of products with bf16 and MXFP4 weights.  kF32 (the default) is exact fp32 math.
// The opt-in fast paths round activations to bf16 (nearest even) and multiply them with
// AVX512-BF16 dot products (vdpbf16ps) where the CPU has them, or with the fp32 kernels on the
// rounded activations elsewhere; the weights stay exact (bf16 as stored; every E2M1 value is
// exact in bf16), so the only change is the activations' rounding:
//   kBf16     products with bf16 weights (the trunk); MXFP4 experts stay exact fp32
//   kBf16All  products with bf16 and MXFP4 weights (the experts' inputs are rounded too)
// Each applies to every n (decode too), so batch invariance holds within each precision.  fp32
// weights always use exact fp32 math.  Every product names its precision (the model passes
// ModelOptions::precision to its layers; routing stays exact).
enum class Precision { kF32, kBf16, kBf16All };
const char* precision_name(Precision p);
Precision parse_precision(const std::string& name);  // "fp32" | "bf16" | "bf16-all"; throws k3::Error
// Whether kBf16 / kBf16All run on vdpbf16ps here (AVX-512 dispatch and a CPU with AVX512-BF16).
bool bf16_dot_available();

// Dispatches on active_isa().
void linear(const Matrix& w, const float* x, int64_t n, float* y, Precision precision = Precision::kF32);
// ya = A x and yb = B x in one pass over the pool (e.g. an MLP's gate and up projections),
// exactly as two linear() calls would compute them (a linear_batch of two; x is prepared once
// when A and B have the same format and width).
void linear_pair(const Matrix& a, const Matrix& b, const float* x, int64_t n, float* ya, float* yb,
                 Precision precision = Precision::kF32);
// linear_batch runs jobs of more tokens than this as successive blocks of at most this many
// tokens each (a block's activations stay in cache while the weights pass over them).
inline constexpr int64_t kTokenBlock = 256;

// One product of a linear_batch: y ([n, w->rows]) = W x (x: [n, w->cols]).
struct LinearJob {
  const Matrix* w = nullptr;
  const float* x = nullptr;
  int64_t n = 0;
  float* y = nullptr;
  Precision precision = Precision::kF32;
};
// Every job's product, each exactly as it is computed alone, in one pass over the pool per token
// block (linear() and linear_pair() are batches of one and two): the rows of all jobs are cut
// into pieces of about equal work (rows x tokens x columns) that the threads claim, so many small
// products (a decode step's routed experts) cost one dispatch and no thread idles at the end of
// each.  Jobs reading the same x (same pointer, n, width, format and precision) prepare it once.
// Jobs may not write each other's x.  In a multi-process run (dist/world.h) the jobs whose matrix
// is row_split compute only this rank's rows (dist/row_split.h) and the ranks then exchange their
// rows in one collective per token block, so every rank ends with the whole of every y,
// bit-identical to one process computing it alone.  Such calls are collective: every rank makes
// them in the same order, from the thread running the forward step (calls from inside pool tasks
// compute every row).
void linear_batch(std::span<const LinearJob> jobs);
// Only rows [r0, r1) of y are written (for partitioning across threads).
void linear_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1,
                 Precision precision = Precision::kF32);

// y[t, c] = sum_r W[r, c] * x[t, r] for t < n  (the transposed product; absorbs MLA's kv_b into q).
void linear_transposed(const Matrix& w, const float* x, int64_t n, float* y);

// Plain, obviously-correct loops: the baseline-ISA level (Isa::kRef), what the tests compare
// against, and the helpers every level shares.
namespace portable {
void linear_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);
void linear_transposed(const Matrix& w, const float* x, float* y);
// Widens / decodes row r into out[cols].
void dequant_row(const Matrix& w, int64_t r, float* out);
// out[i] = x[i] rounded to bf16 (nearest even) and widened back.
void round_to_bf16(const float* x, int64_t n, float* out);
}  // namespace portable

namespace avx2 {
// Any weights (MXFP4: x in the order of mxfp4_shuffle_activations_pairs, to linear_rows_mxfp4).
void linear_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);
// MXFP4 rows: streamed tiles (each row decoded once per pass of up to 4 tokens) up to 16
// tokens, an fp32 panel per row block from 17.
void linear_rows_mxfp4(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);
}
namespace avx512 {
// Dense rows for 2..7 tokens, decode (one token) and MXFP4 (x shuffled as below); many tokens
// of dense rows go to linear_rows_gemm.
void linear_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);
// MXFP4 rows; x in the wide order (mxfp4_shuffle_activations_wide).
void linear_rows_mxfp4(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);
// Dense (f32 / bf16) rows for many tokens: register-blocked GEMM over whole rows, same sums as
// the GEMV.  x: n rows at stride xstride = gemm_x_stride(cols), 64-byte aligned (the padding
// keeps the tokens' rows from aliasing in L1).
int64_t gemm_x_stride(int64_t cols);
void linear_rows_gemm(const Matrix& w, const float* x, int64_t xstride, int64_t n, float* y, int64_t r0, int64_t r1);
// bf16 weights x bf16 activations (xb: n rows at stride xstride, 64-byte aligned, zero-padded
// to whole 32-column steps) with vdpbf16ps; needs AVX512-BF16.
void linear_rows_bf16dot(const Matrix& w, const uint16_t* xb, int64_t xstride, int64_t n, float* y, int64_t r0,
                         int64_t r1);
// MXFP4 weights x bf16 activations packed by mxfp4_pack_bf16_activations (n rows at stride
// xstride, 64-byte aligned) with vdpbf16ps; needs AVX512-BF16.
void linear_rows_mxfp4_bf16dot(const Matrix& w, const uint16_t* xb, int64_t xstride, int64_t n, float* y, int64_t r0,
                               int64_t r1);
}

// MXFP4 kernels read x in a per-32-column "even then odd" order, so packed nibbles need no
// interleaving in registers: xs[g*32 + j] = x[g*32 + 2j], xs[g*32 + 16 + j] = x[g*32 + 2j + 1].
void mxfp4_shuffle_activations(const float* x, int64_t cols, float* xs);
// The AVX2 order: each full pair p of 32-groups (64 columns) as 8 runs of 8, run v lane l holding
// group 2p + l / 4, packed byte 4 (v % 4) + l % 4, its low nibble for v < 4, else its high one:
//   xs[64p + 8v + l] = x[64p + 32 (l / 4) + 2 (4 (v % 4) + l % 4) + v / 4];
// a trailing odd group uses the per-32 order above.
void mxfp4_shuffle_activations_pairs(const float* x, int64_t cols, float* xs);
// The AVX-512 order: each full 128-column block b is stored as 8 runs of 16,
// xs[b*128 + 16k + i] = x[b*128 + 8i + k]; the trailing cols % 128 use the per-32 order above.
void mxfp4_shuffle_activations_wide(const float* x, int64_t cols, float* xs);
// The bf16 order of linear_rows_mxfp4_bf16dot: x rounded to bf16, each 128-column block b
// (the last one zero-padded) as 4 runs of 32 with, for L < 4 and m < 8,
//   out[b*128 + 8L + m]      = x[b*128 + 2(16L + m)]       out[b*128 + 32 + 8L + m] = x[b*128 + 2(16L + 8 + m)]
//   out[b*128 + 64 + 8L + m] = x[b*128 + 2(16L + m) + 1]   out[b*128 + 96 + 8L + m] = x[b*128 + 2(16L + 8 + m) + 1]
// out holds ceil(cols / 128) * 128 values.
void mxfp4_pack_bf16_activations(const float* x, int64_t cols, uint16_t* out);

}  // namespace k3
