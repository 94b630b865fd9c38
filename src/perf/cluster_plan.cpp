#include "perf/cluster_plan.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace k3 {

ClusterPlan plan_cluster(const RankFootprint& f, const ModelFigures& m, const MachineFigures& hw,
                         const ClusterFigures& cl, const PlanOptions& o) {
  K3_CHECK(cl.ranks >= 1, "plan: --ranks must be at least 1 (got ", cl.ranks, ")");
  K3_CHECK(cl.ranks_per_node >= 1, "plan: --ranks-per-node must be at least 1 (got ", cl.ranks_per_node, ")");
  K3_CHECK(hw.mem_gbps > 0 && hw.fp32_gflops > 0, "plan: a rank's memory bandwidth and fp32 peak must be more than 0");
  const int per_node = std::min(cl.ranks_per_node, cl.ranks);
  const int nodes = (cl.ranks + per_node - 1) / per_node;
  K3_CHECK(nodes == 1 || (cl.net_gbps > 0 && cl.net_latency_us > 0), "plan: ", cl.ranks, " ranks on ", nodes,
           " nodes need the network's bandwidth and latency (--net-gbps, --net-latency-us)");
  K3_CHECK(o.prompt_tokens >= 1 && o.chunk_tokens >= 1, "plan: prompt and chunk must have at least 1 token");
  const double mem = hw.mem_gbps * 1e9, peak = hw.fp32_gflops * 1e9;
  ClusterPlan p;
  p.ranks = cl.ranks;
  p.nodes = nodes;
  p.read_bytes = f.read_per_token;
  p.sent_bytes = f.sent_per_token;
  p.received_bytes = f.received_per_token;
  p.exchanges = f.collectives_per_token;

  const double rounds = cl.ranks > 1 ? std::ceil(std::log2(static_cast<double>(cl.ranks))) : 0;
  const double step = (nodes > 1 ? cl.net_latency_us : cl.shm_latency_us) * 1e-6;
  // A node's ranks receive everything but what the node's own ranks computed; rows are spread
  // evenly, so the share from other nodes is (R - per_node) / (R - 1) of each rank's intake.
  const double from_other_nodes =
      cl.ranks > 1 ? static_cast<double>(cl.ranks - per_node) / static_cast<double>(cl.ranks - 1) : 0;
  const double node_in = static_cast<double>(f.received_per_token) * per_node * from_other_nodes;
  p.node_inbound_bytes = static_cast<uint64_t>(node_in);
  auto exchange = [&](double tokens, double* latency, double* bytes) {
    *latency = static_cast<double>(f.collectives_per_token) * rounds * step;
    *bytes = nodes > 1 ? node_in * tokens / (cl.net_gbps * 1e9) : 0;
  };

  p.weights_s = static_cast<double>(f.trunk_read_per_token + f.embed_read_per_token) / (mem * hw.bf16_gemv_eff) +
                static_cast<double>(f.expert_read_per_token) / (mem * hw.mxfp4_gemv_eff);
  p.state_s = 2.0 * static_cast<double>(m.sequence_state_bytes) / mem;
  exchange(1, &p.exchange_latency_s, &p.exchange_bytes_s);
  p.decode_seconds = p.weights_s + p.state_s + p.exchange_latency_s + p.exchange_bytes_s;
  p.decode_tokens_per_second = 1.0 / p.decode_seconds;

  // Prefill: the experts a chunk touches, each rank reading its rows of them.
  const double k = m.top_k, E = m.experts_per_layer;
  const double per_expert = m.top_k > 0 && m.moe_layers > 0
                                ? static_cast<double>(f.expert_read_per_token) / (k * m.moe_layers)
                                : 0.0;
  double total = 0;
  for (int done = 0; done < o.prompt_tokens; done += o.chunk_tokens) {
    const double c = std::min(o.chunk_tokens, o.prompt_tokens - done);
    const double touched = E > 0 ? E * (1.0 - std::pow(1.0 - k / E, c)) : 0;
    const double bytes = static_cast<double>(f.trunk_read_per_token) + touched * m.moe_layers * per_expert;
    const double flops = 2.0 * static_cast<double>(m.active_params()) * c / cl.ranks;
    double lat = 0, by = 0;
    exchange(c, &lat, &by);
    total += std::max(bytes / mem, flops / (peak * hw.prefill_eff)) + lat + by;
  }
  p.prefill_seconds = total;
  p.prefill_tokens_per_second = o.prompt_tokens / total;
  return p;
}

}  // namespace k3
