#include "model/kda_layer.h"

#include <cmath>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/activation.h"
#include "kernels/kda.h"
#include "kernels/linear.h"
#include "kernels/norm.h"

namespace k3 {

void kda_layer_forward(const KdaWeights& w, const TextConfig& c, const BatchLayout& batch, int index, const float* x,
                       float* out, const KdaOptions& options) {
  const int64_t N = batch.rows;
  const int H = c.kda.num_heads, D = c.kda.head_dim, W = c.kda.conv_kernel;
  const int64_t P = c.kda_width();

  std::vector<float> q_raw(N * P), k_raw(N * P), v_raw(N * P), q(N * P), k(N * P), v(N * P);
  linear(w.q, x, N, q_raw.data());
  linear(w.k, x, N, k_raw.data());
  linear(w.v, x, N, v_raw.data());
  for (const BatchSegment& s : batch.segments) {
    KdaLayerState& st = s.state->kda[index];
    const int64_t o = s.row0 * P;
    short_conv_silu(q_raw.data() + o, s.len, P, W, w.q_conv.data(), st.conv_q.data(), q.data() + o);
    short_conv_silu(k_raw.data() + o, s.len, P, W, w.k_conv.data(), st.conv_k.data(), k.data() + o);
    short_conv_silu(v_raw.data() + o, s.len, P, W, w.v_conv.data(), st.conv_v.data(), v.data() + o);
  }
  l2_norm(q.data(), N * H, D, 1e-6f);
  l2_norm(k.data(), N * H, D, 1e-6f);
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (float& e : q) e *= q_scale;

  // Forget gate g (log decay) and beta.
  std::vector<float> fa(N * D), g(N * P), beta(N * H);
  linear(w.f_a, x, N, fa.data());
  linear(w.f_b, fa.data(), N, g.data());
  for (int64_t t = 0; t < N; ++t)
    for (int h = 0; h < H; ++h) {
      const float a = std::exp(w.a_log[h]);
      float* gt = &g[t * P + static_cast<int64_t>(h) * D];
      const float* dt = &w.dt_bias[static_cast<size_t>(h) * D];
      if (c.kda.gate_lower_bound) {
        for (int d = 0; d < D; ++d) gt[d] = a * (gt[d] + dt[d]);  // lb * sigmoid(.) below, vectorised
      } else {
        for (int d = 0; d < D; ++d) gt[d] = -a * softplus(gt[d] + dt[d]);
      }
    }
  if (c.kda.gate_lower_bound) {
    const float lb = *c.kda.gate_lower_bound;
    sigmoid(g.data(), N * P, g.data());
    for (float& e : g) e *= lb;
  }
  linear(w.b, x, N, beta.data());
  sigmoid(beta.data(), N * H, beta.data());

  // Delta rule per (sequence, head), spread over the thread pool.
  std::vector<float> o(N * P);
  const int64_t nseg = static_cast<int64_t>(batch.segments.size());
  global_pool().run(nseg * H, [&](int64_t task, int) {
    const BatchSegment& s = batch.segments[task / H];
    const int h = static_cast<int>(task % H);
    KdaLayerState& st = s.state->kda[index];
    {
      const int64_t off = s.row0 * P + static_cast<int64_t>(h) * D;
      KdaHeadIO io;
      io.q = q.data() + off;
      io.k = k.data() + off;
      io.v = v.data() + off;
      io.g = g.data() + off;
      io.o = o.data() + off;
      io.beta = beta.data() + s.row0 * H + h;
      io.stride_qk = io.stride_v = io.stride_g = io.stride_o = P;
      io.stride_beta = H;
      float* S = st.recurrent.data() + static_cast<size_t>(h) * D * D;
      if (s.len == 1 || options.force_recurrent)
        kda_recurrent(io, s.len, D, D, S);
      else
        kda_chunked(io, s.len, D, D, options.chunk, S);
    }
  });

  // Output gate and projection.
  std::vector<float> gate(N * P);
  if (!w.g.empty()) {
    linear(w.g, x, N, gate.data());
  } else {
    std::vector<float> ga(N * w.g_a.rows);
    linear(w.g_a, x, N, ga.data());
    linear(w.g_b, ga.data(), N, gate.data());
  }
  rms_norm_sigmoid_gated(o.data(), gate.data(), N * H, D, w.o_norm.data(), c.rms_norm_eps, o.data());
  linear(w.o, o.data(), N, out);
}

}  // namespace k3
