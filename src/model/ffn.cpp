#include "model/ffn.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "base/profile.h"
#include "dist/expert_plan.h"
#include "dist/world.h"
#include "kernels/activation.h"
#include "kernels/linear.h"
#include "kernels/moe_route.h"
#include "kernels/norm.h"
#include "model/weight_store.h"

namespace k3 {

namespace {

// g = act(g, u) over count values: SiTU-GLU or SiLU-GLU per the config.
void glu(const TextConfig& c, float* g, const float* u, int64_t count) {
  if (c.act == Activation::kSitu)
    situ_glu(g, u, count, c.situ_beta, c.situ_linear_beta, g);
  else
    silu_glu(g, u, count, g);
}

// Routed experts run in groups of whole experts of at most this many (token, expert) pairs
// (or one expert with more), bounding the group's buffers (~53 KB per pair at K3 widths).
constexpr int64_t kMaxGroupPairs = 512;

}  // namespace

void mlp_forward(const MlpWeights& w, const TextConfig& c, const float* x, int64_t n, float* y, Precision precision) {
  const int64_t m = w.gate.rows;
  std::vector<float> g(n * m), u(n * m);
  linear_pair(w.gate, w.up, x, n, g.data(), u.data(), precision);  // one pool dispatch for both
  glu(c, g.data(), u.data(), n * m);
  linear(w.down, g.data(), n, y, precision);
}

namespace {

// Each token's top_k experts and their weights (sel, weight: n * top_k).  Routing decisions are
// discrete: always exact fp32, whatever the precision setting.
void route(const MoeWeights& w, const TextConfig& c, const float* x, int64_t n, int32_t* sel, float* weight) {
  const int E = c.num_experts, K = c.top_k;
  std::vector<float> logits(n * E);
  linear(w.router, x, n, logits.data(), Precision::kF32);
  for (int64_t t = 0; t < n; ++t)
    route_topk(&logits[t * E], w.router_bias.data(), E, K, c.renormalize, c.routed_scaling_factor, &sel[t * K],
               &weight[t * K]);
}

// The experts any token chose, in index order.
std::vector<int32_t> distinct_experts(std::span<const int32_t> sel, int num_experts) {
  std::vector<bool> used(num_experts, false);
  for (int32_t e : sel) used[e] = true;
  std::vector<int32_t> out;
  for (int e = 0; e < num_experts; ++e)
    if (used[e]) out.push_back(e);
  return out;
}

}  // namespace

std::vector<int32_t> guess_experts(const MoeWeights& w, const TextConfig& c, const float* x, int64_t n) {
  std::vector<int32_t> sel(n * c.top_k);
  std::vector<float> weight(n * c.top_k);
  route(w, c, x, n, sel.data(), weight.data());
  return distinct_experts(sel, c.num_experts);
}

void moe_forward(const MoeWeights& w, const TextConfig& c, const float* x, int64_t n, float* y,
                 std::vector<int32_t>* routes, ExpertSource* source, int layer, int guess_layer,
                 std::span<const int32_t> guess, Precision precision) {
  const int E = c.num_experts, K = c.top_k;
  const int64_t d = c.hidden_size;
  std::vector<int32_t> sel(n * K);
  std::vector<float> weight(n * K);
  {
    ScopedPhase phase(Phase::kRouter);
    route(w, c, x, n, sel.data(), weight.data());
  }
  if (routes != nullptr) *routes = sel;

  // The chosen experts, in index order.  Throughput layout (dist/expert_plan.h): the step's plan
  // says which of each expert's tokens this rank runs, a consecutive run of them (first..last).
  const std::vector<int32_t> chosen = distinct_experts(sel, E);
  const dist::ExpertPlacement& place = w.placement;
  const int me = place.parallel() ? dist::rank() : 0;
  dist::PairPlan plan;
  std::vector<int64_t> first(E, 0), last(E, 0);  // (the rank's run; all of each expert in one process)
  std::vector<int32_t> mine;                      // the chosen experts this rank runs pairs of
  {
    std::vector<int64_t> count(E, 0);
    for (int32_t e : sel) ++count[e];
    if (place.parallel()) {
      plan = dist::plan_pairs(place, sel);
      dist::record_plan(place.replicas() > 0 ? dist::plan_pairs(place, sel, false) : plan, plan);
    }
    for (int32_t e : chosen) {
      last[e] = count[e];
      if (place.parallel()) {
        first[e] = last[e] = 0;
        for (int j = 0; j <= place.replicas(); ++j) {
          const int64_t n = plan.run[e][j];
          if (place.holder(e, j) == me) {
            last[e] = first[e] + n;
            break;
          }
          first[e] += n;
        }
      }
      if (last[e] > first[e]) mine.push_back(e);
    }
  }
  // A streamed source starts reading them now.
  if (source != nullptr) {
    source->prefetch(layer, mine);
    if (guess_layer >= 0 && !guess.empty()) {
      if (place.parallel()) {
        std::vector<int32_t> held;
        for (int32_t e : guess)
          if (place.holds(me, e)) held.push_back(e);
        source->predict(guess_layer, held);
      } else {
        source->predict(guess_layer, guess);
      }
    }
  }

  // The shared MLP needs no routed expert: in one process it runs while their reads are in
  // flight; in the throughput layout, while the routed experts' outputs are exchanged.  Either
  // way it is added after them (the same sum as when it ran last).
  std::vector<float> shared;
  auto run_shared = [&] {
    if (w.shared.gate.empty()) return;
    ScopedPhase phase(Phase::kShared);
    shared.resize(n * d);
    mlp_forward(w.shared, c, x, n, shared.data(), precision);
  };
  if (!place.parallel()) run_shared();

  // Routed experts, grouped by expert so each expert's weights stream once per call; each
  // token accumulates its experts in expert-index order (independent of the batch and of the
  // layout).  A group of experts runs as two pool dispatches (every gate and up product, then
  // every down product), not two per expert: a decode step's 16 experts are small products.
  std::optional<ScopedPhase> experts_phase(Phase::kExperts);
  const int64_t inner = w.latent_down.empty() ? d : w.latent_down.rows;
  std::vector<float> z;
  const float* zin = x;
  if (!w.latent_down.empty()) {
    z.resize(n * inner);
    linear(w.latent_down, x, n, z.data(), precision);
    zin = z.data();
  }
  std::vector<float> acc(n * inner, 0.0f);
  std::vector<std::vector<int64_t>> rows(E);  // the tokens routed to each expert, in order
  std::vector<std::vector<float>> row_w(E);
  for (int64_t t = 0; t < n; ++t)
    for (int i = 0; i < K; ++i) {
      rows[sel[t * K + i]].push_back(t);
      row_w[sel[t * K + i]].push_back(weight[t * K + i]);
    }
  // Over several ranks each output row goes to `outputs` (this rank's pairs, in the order they
  // run) and the sum waits for every rank's rows; in one process it is summed at once.
  std::vector<float> outputs;
  if (place.parallel()) outputs.resize(static_cast<size_t>(plan.load[me] * inner));
  int64_t out_at = 0;
  struct Active {
    int e;
    int64_t ne, r0, in_off, mid_off;  // pairs from rows[e][r0]; offsets into zin_g / out_g and g / u
  };
  std::vector<Active> group;
  std::vector<float> zin_g, g, u, out_g;
  std::vector<LinearJob> jobs;
  std::vector<int32_t> ids;
  std::vector<const MlpWeights*> ews;
  auto run_group = [&] {
    ids.clear();
    for (const Active& a : group) ids.push_back(a.e);
    if (source != nullptr) {
      ews = source->acquire(layer, ids);
    } else {
      ews.clear();
      for (const Active& a : group) ews.push_back(&w.experts[a.e]);
    }
    struct Release {  // the group's experts stay held while their products run
      ExpertSource* s;
      int layer;
      const std::vector<int32_t>& ids;
      ~Release() {
        if (s != nullptr) s->release(layer, ids);
      }
    } release{source, layer, ids};
    int64_t in_size = 0, mid_size = 0;
    for (size_t i = 0; i < group.size(); ++i) {
      const Active& a = group[i];
      in_size = std::max(in_size, a.in_off + a.ne * inner);
      mid_size = std::max(mid_size, a.mid_off + a.ne * ews[i]->gate.rows);
    }
    zin_g.resize(in_size);
    out_g.resize(in_size);
    g.resize(mid_size);
    u.resize(mid_size);
    jobs.clear();
    for (size_t i = 0; i < group.size(); ++i) {
      const Active& a = group[i];
      for (int64_t r = 0; r < a.ne; ++r) {
        const int64_t t = rows[a.e][a.r0 + r];
        std::copy(zin + t * inner, zin + (t + 1) * inner, zin_g.begin() + a.in_off + r * inner);
      }
      const MlpWeights& ew = *ews[i];
      jobs.push_back({&ew.gate, zin_g.data() + a.in_off, a.ne, g.data() + a.mid_off, precision});
      jobs.push_back({&ew.up, zin_g.data() + a.in_off, a.ne, u.data() + a.mid_off, precision});
    }
    linear_batch(jobs);
    jobs.clear();
    for (size_t i = 0; i < group.size(); ++i) {
      const Active& a = group[i];
      const MlpWeights& ew = *ews[i];
      glu(c, g.data() + a.mid_off, u.data() + a.mid_off, a.ne * ew.gate.rows);
      jobs.push_back({&ew.down, g.data() + a.mid_off, a.ne, out_g.data() + a.in_off, precision});
    }
    linear_batch(jobs);
    for (const Active& a : group) {
      if (place.parallel()) {
        std::copy(out_g.begin() + a.in_off, out_g.begin() + a.in_off + a.ne * inner, outputs.begin() + out_at * inner);
        out_at += a.ne;
        continue;
      }
      for (int64_t r = 0; r < a.ne; ++r) {
        float* dst = &acc[rows[a.e][r] * inner];
        const float* o = &out_g[a.in_off + r * inner];
        const float wr = row_w[a.e][r];
        for (int64_t j = 0; j < inner; ++j) dst[j] += wr * o[j];
      }
    }
    group.clear();
  };
  const size_t max_group = source != nullptr ? static_cast<size_t>(std::max(1, source->max_held())) : SIZE_MAX;
  int64_t pairs = 0, in_off = 0, mid_off = 0;
  for (int e : mine) {
    const int64_t ne = last[e] - first[e];
    if (!group.empty() && (pairs + ne > kMaxGroupPairs || group.size() >= max_group)) {
      run_group();
      pairs = in_off = mid_off = 0;
    }
    group.push_back({e, ne, first[e], in_off, mid_off});
    pairs += ne;
    in_off += ne * inner;
    mid_off += ne * c.moe_intermediate_size;
  }
  if (!group.empty()) run_group();

  if (place.parallel()) {
    // Combine: every rank's output rows, in rank order (each rank's in the order it ran them:
    // its experts in index order, each expert's tokens in order), then each token's sum over
    // its experts in expert-index order, as in one process.
    const int R = place.ranks();
    std::vector<int64_t> counts(R), at(R, 0);
    for (int k = 0; k < R; ++k) {
      counts[k] = plan.load[k] * inner;
      if (k > 0) at[k] = at[k - 1] + plan.load[k - 1];
    }
    std::vector<float> all(static_cast<size_t>(plan.pairs * inner));
    dist::PendingExchange exchange = dist::allgather_begin(outputs.data(), counts, all.data());
    experts_phase.reset();
    run_shared();
    experts_phase.emplace(Phase::kExperts);
    dist::allgather_end(exchange);
    for (int32_t e : chosen) {
      int64_t r = 0;
      for (int j = 0; j <= place.replicas(); ++j) {
        const int k = place.holder(e, j);
        for (int64_t i = 0; i < plan.run[e][j]; ++i, ++r) {
          float* dst = &acc[rows[e][r] * inner];
          const float* o = &all[(at[k]++) * inner];
          const float wr = row_w[e][r];
          for (int64_t q = 0; q < inner; ++q) dst[q] += wr * o[q];
        }
      }
    }
  }
  if (!w.latent_norm.empty()) rms_norm(acc.data(), n, inner, w.latent_norm.data(), c.rms_norm_eps, acc.data());
  if (!w.latent_up.empty())
    linear(w.latent_up, acc.data(), n, y, precision);
  else
    std::copy(acc.begin(), acc.end(), y);

  for (size_t i = 0; i < shared.size(); ++i) y[i] += shared[i];
}

}  // namespace k3
