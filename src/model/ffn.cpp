#include "model/ffn.h"

#include <vector>

#include "base/profile.h"
#include "kernels/activation.h"
#include "kernels/linear.h"
#include "kernels/moe_route.h"
#include "kernels/norm.h"

namespace k3 {

void mlp_forward(const MlpWeights& w, const TextConfig& c, const float* x, int64_t n, float* y) {
  const int64_t m = w.gate.rows;
  std::vector<float> g(n * m), u(n * m);
  linear_pair(w.gate, w.up, x, n, g.data(), u.data());  // one pool dispatch for both
  if (c.act == Activation::kSitu)
    situ_glu(g.data(), u.data(), n * m, c.situ_beta, c.situ_linear_beta, g.data());
  else
    silu_glu(g.data(), u.data(), n * m, g.data());
  linear(w.down, g.data(), n, y);
}

void moe_forward(const MoeWeights& w, const TextConfig& c, const float* x, int64_t n, float* y,
                 std::vector<int32_t>* routes) {
  const int E = c.num_experts, K = c.top_k;
  const int64_t d = c.hidden_size;
  std::vector<int32_t> sel(n * K);
  std::vector<float> weight(n * K);
  {
    ScopedPhase phase(Phase::kRouter);
    std::vector<float> logits(n * E);
    {  // routing decisions are discrete: always exact fp32, whatever the precision setting
      const LinearPrecisionScope exact(Precision::kF32);
      linear(w.router, x, n, logits.data());
    }
    for (int64_t t = 0; t < n; ++t)
      route_topk(&logits[t * E], w.router_bias.data(), E, K, c.renormalize, c.routed_scaling_factor, &sel[t * K],
                 &weight[t * K]);
  }
  if (routes != nullptr) *routes = sel;

  // Routed experts, grouped by expert so each expert's weights stream once per call; each
  // token accumulates its experts in expert-index order (independent of the batch).
  ScopedPhase experts_phase(Phase::kExperts);
  const int64_t inner = w.latent_down.empty() ? d : w.latent_down.rows;
  std::vector<float> z;
  const float* zin = x;
  if (!w.latent_down.empty()) {
    z.resize(n * inner);
    linear(w.latent_down, x, n, z.data());
    zin = z.data();
  }
  std::vector<float> acc(n * inner, 0.0f);
  std::vector<int64_t> rows;
  std::vector<float> row_w;
  std::vector<float> zin_e, out_e;
  for (int e = 0; e < E; ++e) {
    rows.clear();
    row_w.clear();
    for (int64_t t = 0; t < n; ++t)
      for (int i = 0; i < K; ++i)
        if (sel[t * K + i] == e) {
          rows.push_back(t);
          row_w.push_back(weight[t * K + i]);
        }
    if (rows.empty()) continue;
    const int64_t ne = static_cast<int64_t>(rows.size());
    zin_e.resize(ne * inner);
    for (int64_t r = 0; r < ne; ++r)
      std::copy(zin + rows[r] * inner, zin + (rows[r] + 1) * inner, zin_e.begin() + r * inner);
    out_e.resize(ne * inner);
    mlp_forward(w.experts[e], c, zin_e.data(), ne, out_e.data());
    for (int64_t r = 0; r < ne; ++r) {
      float* a = &acc[rows[r] * inner];
      const float* o = &out_e[r * inner];
      for (int64_t j = 0; j < inner; ++j) a[j] += row_w[r] * o[j];
    }
  }
  if (!w.latent_norm.empty()) rms_norm(acc.data(), n, inner, w.latent_norm.data(), c.rms_norm_eps, acc.data());
  if (!w.latent_up.empty())
    linear(w.latent_up, acc.data(), n, y);
  else
    std::copy(acc.begin(), acc.end(), y);

  if (!w.shared.gate.empty()) {
    ScopedPhase phase(Phase::kShared);
    std::vector<float> s(n * d);
    mlp_forward(w.shared, c, x, n, s.data());
    for (int64_t i = 0; i < n * d; ++i) y[i] += s[i];
  }
}

}  // namespace k3
