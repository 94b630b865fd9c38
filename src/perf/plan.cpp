#include "perf/plan.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "io/checkpoint.h"
#include "model/k3_config.h"
#include "model/weights.h"

namespace k3 {
namespace {

// A GEMV or GEMM over `bytes` of weights doing `flops` of arithmetic: the longer of its memory
// time at `eff` of the bandwidth and its arithmetic time at `flops_per_s`.  memory = bytes / mem
// (the bandwidth's share); compute = the rest.
struct Pass {
  double memory = 0, compute = 0;
  double total() const { return memory + compute; }
};
Pass pass(double bytes, double flops, double mem_bps, double eff, double flops_per_s) {
  const double t = std::max(bytes / (mem_bps * eff), flops / flops_per_s);
  Pass p;
  p.memory = std::min(t, bytes / mem_bps);
  p.compute = t - p.memory;
  return p;
}

void check_machine(const MachineFigures& m) {
  K3_CHECK(m.disk_gbps > 0 && std::isfinite(m.disk_gbps), "plan: disk bandwidth must be more than 0 GB/s (got ",
           m.disk_gbps, ")");
  K3_CHECK(m.mem_gbps > 0 && std::isfinite(m.mem_gbps), "plan: memory bandwidth must be more than 0 GB/s (got ",
           m.mem_gbps, ")");
  K3_CHECK(m.fp32_gflops > 0 && std::isfinite(m.fp32_gflops), "plan: fp32 peak must be more than 0 GFLOP/s (got ",
           m.fp32_gflops, ")");
  auto eff = [](const char* what, double v) {
    K3_CHECK(v > 0 && v <= 1, "plan: ", what, " efficiency must be in (0, 1] (got ", v, ")");
  };
  eff("bf16 GEMV", m.bf16_gemv_eff);
  eff("MXFP4 GEMV", m.mxfp4_gemv_eff);
  eff("prefill", m.prefill_eff);
}

}  // namespace

uint64_t trunk_resident_budget(const WeightStoreStats& s) {
  // The store keeps the trunk resident when trunk + the minimal expert cache fit; the minimal
  // cache is what minimum_budget holds beside the largest unit.
  return s.trunk_bytes + (s.minimum_budget - s.largest_unit);
}

uint64_t everything_budget(const WeightStoreStats& s) {
  return s.trunk_bytes + static_cast<uint64_t>(s.expert_count) * s.expert_slot_bytes;
}

BudgetPlan plan_budget(const WeightStoreStats& layout, const ModelFigures& m, const MachineFigures& hw,
                       const PlanOptions& o) {
  check_machine(hw);
  K3_CHECK(o.prompt_tokens >= 1, "plan: the prompt must have at least 1 token (got ", o.prompt_tokens, ")");
  K3_CHECK(o.chunk_tokens >= 1, "plan: a prefill chunk must have at least 1 token (got ", o.chunk_tokens, ")");
  K3_CHECK(o.hit_rate < 0 || o.hit_rate <= 1, "plan: a hit rate must be in [0, 1] (got ", o.hit_rate, ")");
  BudgetPlan p;
  p.budget = layout.budget;
  p.layout = layout;
  p.feasible = layout.budget >= layout.minimum_budget;
  // The overhead does not depend on the budget.
  p.metadata_bytes = m.tensor_count * o.metadata_bytes_per_tensor;
  p.state_bytes = m.sequence_state_bytes + m.context_bytes_per_token * static_cast<uint64_t>(o.prompt_tokens);
  p.activation_bytes =
      m.activation_bytes_per_token * static_cast<uint64_t>(std::min(o.chunk_tokens, o.prompt_tokens));
  p.process_bytes = o.process_bytes;
  p.overhead_bytes = p.metadata_bytes + p.state_bytes + p.activation_bytes + p.process_bytes;
  if (!p.feasible) return p;

  const double disk = hw.disk_gbps * 1e9, mem = hw.mem_gbps * 1e9, peak = hw.fp32_gflops * 1e9;
  const double prefill_peak = peak * hw.prefill_eff;
  const double T = static_cast<double>(layout.trunk_bytes);
  // The part of the trunk read from disk for every forward call (the store keeps its largest
  // units resident when the whole does not fit).
  const double S = static_cast<double>(layout.trunk_bytes - layout.trunk_resident_bytes);
  const bool streamed = S > 0;
  const double N = static_cast<double>(layout.expert_count);
  const double e = N > 0 ? static_cast<double>(layout.expert_bytes_total) / N : 0.0;
  const double k = m.top_k, L = m.moe_layers, E = m.experts_per_layer;
  const double trunk_params = static_cast<double>(m.trunk_params);
  const double expert_params = static_cast<double>(m.expert_params);

  // Hit rate: every expert cached -> 1; else the override or uniform routing's S / N.
  const double slots = layout.expert_slots;
  if (N == 0 || slots >= N) p.hit_rate = 1.0;
  else if (o.hit_rate >= 0) p.hit_rate = std::min(1.0, o.hit_rate);
  else p.hit_rate = std::min(1.0, slots / N);
  const double miss = 1.0 - p.hit_rate;

  // Decode.
  p.expert_requests_per_token = N > 0 ? k * L : 0.0;
  p.expert_misses_per_token = p.expert_requests_per_token * miss;
  p.disk_bytes_per_token = S + p.expert_misses_per_token * e;
  {
    const Pass trunk = pass(T, 2 * trunk_params, mem, hw.bf16_gemv_eff, peak);
    const double trunk_read = streamed ? S / disk : 0.0;
    if (trunk_read > trunk.total()) {
      p.decode.disk += trunk_read;
    } else {
      p.decode.memory += trunk.memory;
      p.decode.compute += trunk.compute;
    }
    const double req = p.expert_requests_per_token;
    const Pass experts = pass(req * e, 2 * req * expert_params, mem, hw.mxfp4_gemv_eff, peak);
    const double expert_read = p.expert_misses_per_token * e / disk;
    if (expert_read > experts.total()) {
      p.decode.disk += expert_read;
    } else {
      p.decode.memory += experts.memory;
      p.decode.compute += experts.compute;
    }
  }
  p.decode_seconds = p.decode.total();
  p.decode_tokens_per_second = p.decode_seconds > 0 ? 1.0 / p.decode_seconds : 0.0;

  // Prefill, chunk by chunk.
  auto add_chunk = [&](int c) {
    const double trunk_read = streamed ? S / disk : 0.0;
    const Pass trunk = pass(T, 2 * trunk_params * c, mem, hw.bf16_gemv_eff, prefill_peak);
    if (trunk_read > trunk.total()) {
      p.prefill.disk += trunk_read;
    } else {
      p.prefill.memory += trunk.memory;
      p.prefill.compute += trunk.compute;
    }
    if (N == 0) return;
    const double distinct = E > 0 ? E * (1.0 - std::pow(1.0 - k / E, c)) : 0.0;  // per MoE layer
    const double touched = L * distinct;
    const double expert_read = touched * miss * e / disk;
    const Pass experts = pass(touched * e, 2 * k * L * expert_params * c, mem, hw.mxfp4_gemv_eff, prefill_peak);
    if (expert_read > experts.total()) {
      p.prefill.disk += expert_read;
    } else {
      p.prefill.memory += experts.memory;
      p.prefill.compute += experts.compute;
    }
  };
  for (int done = 0; done < o.prompt_tokens; done += o.chunk_tokens)
    add_chunk(std::min(o.chunk_tokens, o.prompt_tokens - done));
  p.prefill_seconds = p.prefill.total();
  p.prefill_tokens_per_second = p.prefill_seconds > 0 ? o.prompt_tokens / p.prefill_seconds : 0.0;

  // Memory.
  p.weight_bytes = layout.trunk_resident_bytes + layout.ring_bytes +
                   static_cast<uint64_t>(layout.expert_slots) * layout.expert_slot_bytes;
  p.peak_rss_bytes = p.weight_bytes + p.overhead_bytes;
  p.exceeds_ram = hw.ram_bytes > 0 && p.weight_bytes > hw.ram_bytes;
  return p;
}

ModelFigures model_figures(const ModelConfig& config, const ModelWeights& w, const Checkpoint& ckpt) {
  const TextConfig& c = config.text;
  ModelFigures f;
  f.top_k = c.top_k;
  f.experts_per_layer = c.num_experts;
  uint64_t routed_params = 0;
  auto params = [](const Matrix& m) { return static_cast<uint64_t>(m.rows) * static_cast<uint64_t>(m.cols); };
  for (const LayerWeights& layer : w.layers) {
    if (!layer.moe || layer.moe_w.experts.empty()) continue;
    ++f.moe_layers;
    for (const MlpWeights& e : layer.moe_w.experts) {
      const uint64_t n = params(e.gate) + params(e.up) + params(e.down);
      routed_params += n;
      f.expert_params = std::max(f.expert_params, n);
    }
  }
  f.trunk_params = w.total_params - routed_params - params(w.embed);
  f.tensor_count = ckpt.tensors().size();
  f.sequence_state_bytes = static_cast<uint64_t>(c.num_kda_layers()) *
                           (static_cast<uint64_t>(c.kda.num_heads) * c.kda.head_dim * c.kda.head_dim +
                            3ull * (c.kda.conv_kernel - 1) * c.kda_width()) *
                           sizeof(float);
  f.context_bytes_per_token = static_cast<uint64_t>(c.num_mla_layers()) * c.mla_cache_width() * sizeof(float);
  const uint64_t blocks =
      c.attn_res_block_size && *c.attn_res_block_size > 0
          ? static_cast<uint64_t>((c.num_layers + *c.attn_res_block_size - 1) / *c.attn_res_block_size)
          : 0;
  const uint64_t widest = std::max<uint64_t>(
      {static_cast<uint64_t>(c.intermediate_size), static_cast<uint64_t>(c.top_k) * c.moe_intermediate_size,
       3ull * c.kda_width(),
       static_cast<uint64_t>(c.num_heads) * (c.qk_nope_head_dim + c.qk_rope_head_dim + c.v_head_dim)});
  f.activation_bytes_per_token = sizeof(float) * ((blocks + 4) * c.hidden_size + 2 * widest);
  return f;
}

}  // namespace k3
