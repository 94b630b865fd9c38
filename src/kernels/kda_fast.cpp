// The dispatching KDA entry points: the vectorised token-by-token step and the chunked form
// as small matrix products (see kda.h for the math and when the factorised form applies).
#include <algorithm>
#include <cmath>
#include <vector>

#include "base/cpu_features.h"
#include "kernels/kda.h"
#include "kernels/linear.h"
#include "kernels/small_gemm.h"

namespace k3 {

void kda_recurrent(const KdaHeadIO& io, int64_t T, int K, int V, float* state) {
  switch (active_isa()) {
    case Isa::kAvx512: avx512::kda_recurrent(io, T, K, V, state); return;
    case Isa::kAvx2: avx2::kda_recurrent(io, T, K, V, state); return;
    case Isa::kRef: ref::kda_recurrent(io, T, K, V, state); return;
  }
}

namespace {

constexpr float kMinChunkLogDecay = -80.0f;  // exp(+-80) is comfortably inside fp32's range

Matrix f32(const std::vector<float>& data, int64_t rows, int64_t cols) {
  return Matrix{WeightFormat::kF32, rows, cols, data.data(), nullptr};
}

struct ChunkScratch {
  std::vector<float> G, Km, X1, X2, LA, X, U, OS, O2, Kd, Vc;
  void size(int C, int K, int V) {
    for (auto* v : {&G, &Km, &Kd}) v->resize(static_cast<size_t>(C) * K);
    X1.resize(static_cast<size_t>(2) * C * K);  // [Kp; Qp]
    X2.resize(static_cast<size_t>(2) * C * K);  // [Wm; Qp]
    LA.resize(static_cast<size_t>(2) * C * C);  // [L; A] (row r: products with Km_s)
    X.resize(static_cast<size_t>(C) * C);
    for (auto* v : {&U, &O2, &Vc}) v->resize(static_cast<size_t>(C) * V);
    OS.resize(static_cast<size_t>(2) * C * V);  // [Wm S; Qp S]
  }
};

// One chunk of c tokens starting at io's row 0, factorised.  Returns false (and changes
// nothing) if the chunk's decay is too steep for the factorisation.
bool chunk_factorised(const KdaHeadIO& io, int c, int K, int V, float* S, ChunkScratch& s) {
  for (int r = 0; r < c; ++r) {
    const float* g = io.g + r * io.stride_g;
    for (int d = 0; d < K; ++d) s.G[r * K + d] = (r == 0 ? 0.0f : s.G[(r - 1) * K + d]) + g[d];
  }
  const float* Glast = &s.G[static_cast<size_t>(c - 1) * K];
  if (*std::min_element(Glast, Glast + K) < kMinChunkLogDecay) return false;

  float* Kp = s.X1.data();
  float* Qp = s.X1.data() + static_cast<size_t>(c) * K;
  for (int r = 0; r < c; ++r) {
    const float* q = io.q + r * io.stride_qk;
    const float* k = io.k + r * io.stride_qk;
    for (int d = 0; d < K; ++d) {
      const float e = std::exp(s.G[r * K + d]);
      Kp[r * K + d] = k[d] * e;
      s.Km[r * K + d] = k[d] / e;
      Qp[r * K + d] = q[d] * e;
    }
    std::copy(io.v + r * io.stride_v, io.v + r * io.stride_v + V, &s.Vc[static_cast<size_t>(r) * V]);
  }
  // [L; A][r][s] = [Kp; Qp]_r . Km_s; L keeps s < r times beta_r, A keeps s <= r.
  linear(f32(s.Km, c, K), s.X1.data(), 2 * c, s.LA.data());
  float* L = s.LA.data();
  float* A = s.LA.data() + static_cast<size_t>(c) * c;
  for (int r = 0; r < c; ++r) {
    const float beta = io.beta[r * io.stride_beta];
    for (int j = 0; j < c; ++j) {
      L[r * c + j] = j < r ? beta * L[r * c + j] : 0.0f;
      if (j > r) A[r * c + j] = 0.0f;
    }
  }
  // X = (I + L)^-1 diag(beta): forward substitution.
  for (int r = 0; r < c; ++r)
    for (int j = 0; j < c; ++j) {
      float x = j == r ? io.beta[r * io.stride_beta] : 0.0f;
      for (int m = j; m < r; ++m) x -= L[r * c + m] * s.X[m * c + j];
      s.X[r * c + j] = j <= r ? x : 0.0f;
    }
  // Wm = X Kp (into the top of X2, Qp below it), U = X v; then [Wm; Qp] S in one pass over S.
  float* Wm = s.X2.data();
  gemm_nn(s.X.data(), Kp, Wm, c, c, K, false);
  std::copy(Qp, Qp + static_cast<size_t>(c) * K, s.X2.data() + static_cast<size_t>(c) * K);
  gemm_nn(s.X.data(), s.Vc.data(), s.U.data(), c, c, V, false);
  gemm_nn(s.X2.data(), S, s.OS.data(), 2 * c, K, V, false);
  const float* WS = s.OS.data();
  const float* O1 = s.OS.data() + static_cast<size_t>(c) * V;
  for (size_t i = 0; i < static_cast<size_t>(c) * V; ++i) s.U[i] -= WS[i];  // U now holds Vn
  // O = Qp S + A Vn.
  gemm_nn(A, s.U.data(), s.O2.data(), c, c, V, false);
  for (int r = 0; r < c; ++r) {
    float* o = io.o + r * io.stride_o;
    for (int e = 0; e < V; ++e) o[e] = O1[r * V + e] + s.O2[r * V + e];
  }
  // S <- diag(exp G_last) S + (Km o exp(G_last))^T Vn.
  for (int d = 0; d < K; ++d) {
    const float decay = std::exp(Glast[d]);
    float* row = S + static_cast<int64_t>(d) * V;
    for (int e = 0; e < V; ++e) row[e] *= decay;
    for (int r = 0; r < c; ++r) s.Kd[static_cast<size_t>(d) * c + r] = s.Km[r * K + d] * decay;  // transposed
  }
  gemm_nn(s.Kd.data(), s.U.data(), S, K, c, V, true);
  return true;
}

}  // namespace

void kda_chunked(const KdaHeadIO& io, int64_t T, int K, int V, int chunk, float* state) {
  if (active_isa() == Isa::kRef) {
    ref::kda_chunked(io, T, K, V, chunk, state);
    return;
  }
  const int C = std::max(1, chunk);
  thread_local ChunkScratch scratch;
  scratch.size(C, K, V);
  for (int64_t t0 = 0; t0 < T; t0 += C) {
    const int c = static_cast<int>(std::min<int64_t>(C, T - t0));
    KdaHeadIO sub = io;
    sub.q += t0 * io.stride_qk;
    sub.k += t0 * io.stride_qk;
    sub.v += t0 * io.stride_v;
    sub.g += t0 * io.stride_g;
    sub.beta += t0 * io.stride_beta;
    sub.o += t0 * io.stride_o;
    if (!chunk_factorised(sub, c, K, V, state, scratch)) ref::kda_chunked(sub, c, K, V, c, state);
  }
}

}  // namespace k3
