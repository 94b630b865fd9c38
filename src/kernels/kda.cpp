#include "kernels/kda.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/activation.h"
#include "kernels/kda_step.h"

namespace k3 {

namespace portable {

void kda_recurrent(const KdaHeadIO& io, int64_t T, int K, int V, float* state) {
  kda_detail::recurrent_kfirst(io, T, K, V, state);
}

void kda_chunked(const KdaHeadIO& io, int64_t T, int K, int V, int chunk, float* state) {
  const int C = std::max(1, chunk);
  std::vector<float> G(static_cast<size_t>(C) * K);      // cumulative log decay within the chunk
  std::vector<float> L(static_cast<size_t>(C) * C);      // beta_r k_r . (exp(G_r - G_s) k_s), s < r
  std::vector<float> Aqk(static_cast<size_t>(C) * C);    // q_r . (exp(G_r - G_s) k_s), s <= r
  std::vector<float> X(static_cast<size_t>(C) * C);      // (I + L)^-1 diag(beta)
  std::vector<float> Wm(static_cast<size_t>(C) * K);     // X (exp(G) o k)
  std::vector<float> Vn(static_cast<size_t>(C) * V);     // X v - Wm S
  std::vector<float> kd(static_cast<size_t>(C) * K);     // scratch rows
  std::vector<float> decay_last(static_cast<size_t>(K));

  for (int64_t t0 = 0; t0 < T; t0 += C) {
    const int c = static_cast<int>(std::min<int64_t>(C, T - t0));
    auto q = [&](int r) { return io.q + (t0 + r) * io.stride_qk; };
    auto k = [&](int r) { return io.k + (t0 + r) * io.stride_qk; };
    auto v = [&](int r) { return io.v + (t0 + r) * io.stride_v; };
    auto beta = [&](int r) { return io.beta[(t0 + r) * io.stride_beta]; };

    for (int r = 0; r < c; ++r) {
      const float* g = io.g + (t0 + r) * io.stride_g;
      float* Gr = &G[static_cast<size_t>(r) * K];
      for (int d = 0; d < K; ++d) Gr[d] = (r == 0 ? 0.0f : G[static_cast<size_t>(r - 1) * K + d]) + g[d];
    }
    // Intra-chunk interactions with pairwise decays (exponent <= 0, never overflows).
    for (int r = 0; r < c; ++r) {
      const float* Gr = &G[static_cast<size_t>(r) * K];
      for (int s = 0; s <= r; ++s) {
        const float* Gs = &G[static_cast<size_t>(s) * K];
        const float* ks = k(s);
        float skk = 0.0f, sqk = 0.0f;
        for (int d = 0; d < K; ++d) {
          const float e = ks[d] * std::exp(Gr[d] - Gs[d]);
          skk += k(r)[d] * e;
          sqk += q(r)[d] * e;
        }
        L[static_cast<size_t>(r) * C + s] = s < r ? beta(r) * skk : 0.0f;
        Aqk[static_cast<size_t>(r) * C + s] = sqk;
      }
    }
    // X = (I + L)^-1 diag(beta) by forward substitution (X is lower triangular).
    for (int r = 0; r < c; ++r) {
      for (int j = 0; j <= r; ++j) {
        float x = r == j ? beta(r) : 0.0f;
        for (int s = j; s < r; ++s) x -= L[static_cast<size_t>(r) * C + s] * X[static_cast<size_t>(s) * C + j];
        X[static_cast<size_t>(r) * C + j] = x;
      }
    }
    // kd = exp(G) o k; Wm = X kd; Vn = X v - Wm S.
    for (int r = 0; r < c; ++r)
      for (int d = 0; d < K; ++d)
        kd[static_cast<size_t>(r) * K + d] = k(r)[d] * std::exp(G[static_cast<size_t>(r) * K + d]);
    for (int r = 0; r < c; ++r) {
      float* w = &Wm[static_cast<size_t>(r) * K];
      float* vn = &Vn[static_cast<size_t>(r) * V];
      std::fill(w, w + K, 0.0f);
      std::fill(vn, vn + V, 0.0f);
      for (int j = 0; j <= r; ++j) {
        const float x = X[static_cast<size_t>(r) * C + j];
        const float* kj = &kd[static_cast<size_t>(j) * K];
        const float* vj = v(j);
        for (int d = 0; d < K; ++d) w[d] += x * kj[d];
        for (int e = 0; e < V; ++e) vn[e] += x * vj[e];
      }
      for (int e = 0; e < V; ++e) {
        float acc = 0.0f;
        for (int d = 0; d < K; ++d) acc += w[d] * state[static_cast<int64_t>(d) * V + e];
        vn[e] -= acc;
      }
    }
    // Outputs: O_r = (q_r o exp(G_r)) S + sum_{s<=r} Aqk[r,s] Vn_s.
    for (int r = 0; r < c; ++r) {
      float* qd = &kd[static_cast<size_t>(r) * K];  // reuse kd rows: row r no longer needed after Wm
      const float* Gr = &G[static_cast<size_t>(r) * K];
      for (int d = 0; d < K; ++d) qd[d] = q(r)[d] * std::exp(Gr[d]);
      float* o = io.o + (t0 + r) * io.stride_o;
      for (int e = 0; e < V; ++e) {
        float acc = 0.0f;
        for (int d = 0; d < K; ++d) acc += qd[d] * state[static_cast<int64_t>(d) * V + e];
        for (int s = 0; s <= r; ++s) acc += Aqk[static_cast<size_t>(r) * C + s] * Vn[static_cast<size_t>(s) * V + e];
        o[e] = acc;
      }
    }
    // State: S <- S diag(exp G_last) + sum_r Vn_r (k_r o exp(G_last - G_r))^T.
    const float* Glast = &G[static_cast<size_t>(c - 1) * K];
    for (int d = 0; d < K; ++d) decay_last[d] = std::exp(Glast[d]);
    for (int r = 0; r < c; ++r) {
      float* kr = &kd[static_cast<size_t>(r) * K];
      const float* Gr = &G[static_cast<size_t>(r) * K];
      for (int d = 0; d < K; ++d) kr[d] = k(r)[d] * std::exp(Glast[d] - Gr[d]);
    }
    for (int d = 0; d < K; ++d) {
      float* srow = state + static_cast<int64_t>(d) * V;
      for (int e = 0; e < V; ++e) srow[e] *= decay_last[d];
      for (int r = 0; r < c; ++r) {
        const float kr = kd[static_cast<size_t>(r) * K + d];
        const float* vn = &Vn[static_cast<size_t>(r) * V];
        for (int e = 0; e < V; ++e) srow[e] += kr * vn[e];
      }
    }
  }
}

}  // namespace portable

void short_conv_silu(const float* x, int64_t T, int64_t C, int W, const float* weight, float* hist, float* y) {
  short_conv_silu_channels(x, T, C, W, weight, hist, 0, C, y, C);
}

void short_conv_silu_channels(const float* x, int64_t T, int64_t C, int W, const float* weight, float* hist,
                              int64_t c0, int64_t n, float* y, int64_t y_stride) {
  const int H = W - 1;
  // Taps transposed to [W][n] so the loops below run along contiguous channels.  (Per-thread
  // scratch: decode calls this for every head of every KDA layer at each token.)
  thread_local std::vector<float> taps, next;
  taps.resize(static_cast<size_t>(W) * n);
  for (int64_t j = 0; j < n; ++j)
    for (int w = 0; w < W; ++w) taps[static_cast<size_t>(w) * n + j] = weight[(c0 + j) * W + w];
  // Input row i (< 0: from the history) of this channel range.
  auto input = [&](int64_t i) { return i >= 0 ? x + i * C + c0 : hist + (H + i) * C + c0; };
  for (int64_t t = 0; t < T; ++t) {
    float* __restrict yt = y + t * y_stride;
    for (int64_t j = 0; j < n; ++j) yt[j] = 0.0f;
    for (int w = 0; w < W; ++w) {  // tap W-1 on the current token; the sum runs oldest first
      const float* __restrict in = input(t - H + w);
      const float* __restrict tw = &taps[static_cast<size_t>(w) * n];
      for (int64_t j = 0; j < n; ++j) yt[j] += tw[j] * in[j];
    }
    silu(yt, n, yt);
  }
  // Keep the newest H raw inputs (read before any is overwritten).
  next.resize(static_cast<size_t>(H) * n);
  for (int i = 0; i < H; ++i) std::copy(input(T - H + i), input(T - H + i) + n, &next[static_cast<size_t>(i) * n]);
  for (int i = 0; i < H; ++i) std::copy(&next[static_cast<size_t>(i) * n], &next[static_cast<size_t>(i + 1) * n], hist + i * C + c0);
}

}  // namespace k3
