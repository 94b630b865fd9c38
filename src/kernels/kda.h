// Kimi Delta Attention core: the gated delta rule for one head, fp32.  Inputs are already
// prepared: q and k L2-normalised, q scaled by K^-1/2, g the per-key-channel log decay (<= 0),
// beta in (0, 1).  The state is kept key-major, S[k][v] (K x V): the math is the same as the
// release's V-first layout, and every update is then element-wise along v (no horizontal sums).
//
// Per token:  S <- diag(exp g) S;  u = beta (v - S^T k);  S += k u^T;  o = S^T q  (read after write)
//
// kda_recurrent() is that loop (the golden model, also the decode step).  kda_chunked() is the
// WY/UT chunk form of Kimi Linear (arXiv:2510.26692); both give the same result up to fp32
// rounding.  The fast versions (kda_chunk.h) read S once and write it once per decoded token,
// and run the chunked form as register-blocked GEMMs with a decay factorisation that cannot
// overflow.
#pragma once

#include <cstdint>

namespace k3 {

struct KdaHeadIO {
  const float* q = nullptr;     // row t at q + t * stride_qk, K values
  const float* k = nullptr;     // row t at k + t * stride_qk
  const float* v = nullptr;     // row t at v + t * stride_v, V values
  const float* g = nullptr;     // row t at g + t * stride_g, K values
  const float* beta = nullptr;  // beta[t * stride_beta]
  float* o = nullptr;           // row t at o + t * stride_o, V values
  int64_t stride_qk = 0, stride_v = 0, stride_g = 0, stride_beta = 1, stride_o = 0;
};

// state: K*V floats, S[k*V + v].  These dispatch to the fast implementations.
void kda_recurrent(const KdaHeadIO& io, int64_t T, int K, int V, float* state);
// The chunked form, any gate <= 0.  The fast versions round `chunk` up to a multiple of 16 (the
// result does not depend on the chunk length beyond fp32 rounding); kKdaChunk is the tuned one.
constexpr int kKdaChunk = 32;
void kda_chunked(const KdaHeadIO& io, int64_t T, int K, int V, int chunk, float* state);

// The plain versions (kda.cpp): the baseline-ISA level (Isa::kRef) and what the tests compare
// the vector ones with (portable::kda_chunked: pairwise exp(G_r - G_s)).
namespace portable {
void kda_recurrent(const KdaHeadIO& io, int64_t T, int K, int V, float* state);
void kda_chunked(const KdaHeadIO& io, int64_t T, int K, int V, int chunk, float* state);
}  // namespace portable
// The vector versions (kda_isa.cpp, one build per level).
namespace avx512 {
void kda_recurrent(const KdaHeadIO& io, int64_t T, int K, int V, float* state);
void kda_chunked(const KdaHeadIO& io, int64_t T, int K, int V, int chunk, float* state);
}
namespace avx2 {
void kda_recurrent(const KdaHeadIO& io, int64_t T, int K, int V, float* state);
void kda_chunked(const KdaHeadIO& io, int64_t T, int K, int V, int chunk, float* state);
}

// Causal depthwise convolution over W taps followed by SiLU, for T new rows of C channels.
// hist holds the previous W-1 raw inputs (row-major [W-1][C], oldest first; zeros at the start
// of a sequence) and is advanced past the new rows.  weight is [C][W] with tap W-1 on the
// current token.  y[T][C] must not alias x.
void short_conv_silu(const float* x, int64_t T, int64_t C, int W, const float* weight, float* hist, float* y);
// The same for channels [c0, c0 + n) only (threads may run disjoint ranges at once), with output
// row t of the range at y + t * y_stride: a head's channels can go straight into a head-major
// [heads][T][dim] buffer (y_stride = dim), the layout kda_chunked() reads fastest.
void short_conv_silu_channels(const float* x, int64_t T, int64_t C, int W, const float* weight, float* hist,
                              int64_t c0, int64_t n, float* y, int64_t y_stride);

}  // namespace k3
