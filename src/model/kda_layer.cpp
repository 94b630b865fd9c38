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
                       float* out, const KdaOptions& options, Precision precision) {
  const int64_t N = batch.rows;
  const int H = c.kda.num_heads, D = c.kda.head_dim, W = c.kda.conv_kernel;
  const int64_t P = c.kda_width();

  // The projections are token-major [N][heads * D]; everything the delta rule reads is made
  // head-major [heads][N][D] on the way (the short conv writes it, the gate transform too), so a
  // head's rows are contiguous.  Token-major rows of one head lie a whole [heads * D] row apart, a
  // stride that maps every row to the same few cache sets and that no prefetcher follows, which
  // slows the chunked kernel down markedly.
  auto head_row = [N, D](int64_t h, int64_t row) { return (h * N + row) * D; };
  std::vector<float> q_raw(N * P), k_raw(N * P), v_raw(N * P), q(N * P), k(N * P), v(N * P);
  // Every product of x in one batch (x prepared once, one pool dispatch, and over several ranks
  // one exchange), then the low-rank second halves in another.
  std::vector<float> fa(N * D), g_tok(N * P), beta(N * H), gate(N * P), ga(N * w.g_a.rows);
  {
    std::vector<LinearJob> jobs = {{&w.q, x, N, q_raw.data(), precision},
                                   {&w.k, x, N, k_raw.data(), precision},
                                   {&w.v, x, N, v_raw.data(), precision},
                                   {&w.f_a, x, N, fa.data(), precision},
                                   {&w.b, x, N, beta.data(), precision}};
    if (!w.g.empty()) jobs.push_back({&w.g, x, N, gate.data(), precision});
    else jobs.push_back({&w.g_a, x, N, ga.data(), precision});
    linear_batch(jobs);
    jobs = {{&w.f_b, fa.data(), N, g_tok.data(), precision}};
    if (w.g.empty()) jobs.push_back({&w.g_b, ga.data(), N, gate.data(), precision});
    linear_batch(jobs);
  }
  global_pool().run(H, [&](int64_t h, int) {
    for (const BatchSegment& s : batch.segments) {
      KdaLayerState& st = s.state->kda[index];
      const int64_t in = s.row0 * P, out = head_row(h, s.row0), c0 = h * D;
      short_conv_silu_channels(q_raw.data() + in, s.len, P, W, w.q_conv.data(), st.conv_q.data(), c0, D, q.data() + out, D);
      short_conv_silu_channels(k_raw.data() + in, s.len, P, W, w.k_conv.data(), st.conv_k.data(), c0, D, k.data() + out, D);
      short_conv_silu_channels(v_raw.data() + in, s.len, P, W, w.v_conv.data(), st.conv_v.data(), c0, D, v.data() + out, D);
    }
  });
  l2_norm(q.data(), N * H, D, 1e-6f);
  l2_norm(k.data(), N * H, D, 1e-6f);
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (float& e : q) e *= q_scale;

  // Forget gate g (log decay, head-major; q_raw's buffer is free again) and beta ([N][H]).
  std::vector<float>& g = q_raw;
  for (int64_t t = 0; t < N; ++t)
    for (int h = 0; h < H; ++h) {
      const float a = std::exp(w.a_log[h]);
      const float* src = &g_tok[t * P + static_cast<int64_t>(h) * D];
      float* gt = &g[head_row(h, t)];
      const float* dt = &w.dt_bias[static_cast<size_t>(h) * D];
      if (c.kda.gate_lower_bound) {
        for (int d = 0; d < D; ++d) gt[d] = a * (src[d] + dt[d]);  // lb * sigmoid(.) below, vectorised
      } else {
        for (int d = 0; d < D; ++d) gt[d] = -a * softplus(src[d] + dt[d]);
      }
    }
  if (c.kda.gate_lower_bound) {
    const float lb = *c.kda.gate_lower_bound;
    sigmoid(g.data(), N * P, g.data());
    for (float& e : g) e *= lb;
  }
  sigmoid(beta.data(), N * H, beta.data());

  // Delta rule per (sequence, head), spread over the thread pool; o head-major in k_raw's buffer,
  // then back to token-major rows (in v_raw's) for the gated norm.
  std::vector<float>& o_heads = k_raw;
  const int64_t nseg = static_cast<int64_t>(batch.segments.size());
  global_pool().run(nseg * H, [&](int64_t task, int) {
    const BatchSegment& s = batch.segments[task / H];
    const int h = static_cast<int>(task % H);
    KdaLayerState& st = s.state->kda[index];
    const int64_t off = head_row(h, s.row0);
    KdaHeadIO io;
    io.q = q.data() + off;
    io.k = k.data() + off;
    io.v = v.data() + off;
    io.g = g.data() + off;
    io.o = o_heads.data() + off;
    io.beta = beta.data() + s.row0 * H + h;
    io.stride_qk = io.stride_v = io.stride_g = io.stride_o = D;
    io.stride_beta = H;
    float* S = st.recurrent.data() + static_cast<size_t>(h) * D * D;
    if (s.len == 1 || options.force_recurrent)
      kda_recurrent(io, s.len, D, D, S);
    else
      kda_chunked(io, s.len, D, D, options.chunk, S);
  });
  std::vector<float>& o = v_raw;
  global_pool().run(H, [&](int64_t h, int) {
    for (int64_t t = 0; t < N; ++t)
      std::copy_n(&o_heads[head_row(h, t)], D, &o[t * P + h * D]);
  });

  // Output gate (computed above) and projection.
  rms_norm_sigmoid_gated(o.data(), gate.data(), N * H, D, w.o_norm.data(), c.rms_norm_eps, o.data());
  linear(w.o, o.data(), N, out, precision);
}

}  // namespace k3
