// k3 plan: predict what the weight store makes of a checkpoint at several memory budgets on this
// machine (measured) or another one (given figures, or --preset-machine c-engine): decode and
// prefill tokens/s, where a token's time goes, expert cache hit rate and peak RSS.  The model is
// perf/plan.h; the layouts are the weight store's own (WeightStore::layout).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/log.h"
#include "base/thread_pool.h"
#include "cli/commands.h"
#include "engine/generator.h"
#include "io/available_memory.h"
#include "io/mapped_file.h"
#include "model/k3_model.h"
#include "model/partition.h"
#include "perf/disk_probe.h"
#include "perf/machine.h"
#include "perf/cluster_plan.h"
#include "perf/plan.h"

namespace k3::cli {
namespace {

// The public C engine's published setup for Kimi K3 and its seconds per token there.  Cores,
// disk and RAM are published; memory bandwidth and fp32 peak are not, and are assumed.
constexpr int kCEngineCores = 124;
constexpr double kCEngineDiskGbps = 4.6;
constexpr double kCEngineMemGbps = 300;      // assumed: 2 sockets of 8-channel DDR at ~60% of peak
constexpr double kCEngineGflops = 6000;      // assumed: 124 cores x 32 fp32 FLOP/cycle x ~1.5 GHz all-core
constexpr uint64_t kCEngineRam = uint64_t{720} * 1000 * 1000 * 1000;
constexpr const char* kCEngineBudgets = "8G,32G,64G,trunk";
struct Published {
  const char* label;
  uint64_t budget;  // 0: trunk resident
  double seconds_per_token;
};
constexpr Published kCEnginePublished[] = {
    {"8G", uint64_t{8} << 30, 26.5},
    {"32G", uint64_t{32} << 30, 24.2},
    {"64G", uint64_t{64} << 30, 19.8},
    {"trunk", 0, 5.59},
};
constexpr double kCEnginePeakRssGb = 8.24;  // at 8 GB

// Three significant digits without an exponent (0.0351, 3.51, 35.1, 351).
std::string sig3(double x) {
  char buf[32];
  if (x == 0 || !std::isfinite(x)) std::snprintf(buf, sizeof buf, "%g", x);
  else if (std::fabs(x) >= 100) std::snprintf(buf, sizeof buf, "%.0f", x);
  else {
    const int decimals = std::max(0, 2 - static_cast<int>(std::floor(std::log10(std::fabs(x)))));
    std::snprintf(buf, sizeof buf, "%.*f", std::min(decimals, 8), x);
  }
  return buf;
}

std::string percent(double part, double whole) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

// One decimal below 10% (0.3%, 4.4%), none above.
std::string hit_percent(double h) {
  char buf[16];
  std::snprintf(buf, sizeof buf, h < 0.1 ? "%.1f%%" : "%.0f%%", 100.0 * h);
  return buf;
}

struct Budget {
  std::string label;  // as given
  uint64_t bytes = 0;
  bool trunk = false;  // the trunk-resident keyword
};

std::vector<Budget> parse_budgets(const std::string& text, const WeightStoreStats& sizes) {
  std::vector<Budget> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(pos, end - pos);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    K3_CHECK(!item.empty(), "--budget: an empty entry in '", text, "' (sizes such as 8G or 40%, 'trunk' or 'all', "
             "separated by commas)");
    Budget b;
    b.label = item;
    if (item == "trunk") {
      b.bytes = trunk_resident_budget(sizes);
      b.trunk = true;
    } else if (item == "all") {
      b.bytes = everything_budget(sizes);
    } else {
      b.bytes = parse_byte_size(item);
      K3_CHECK(b.bytes > 0, "--budget: '", item, "' is 0 bytes");
    }
    out.push_back(b);
    pos = end + 1;
  }
  return out;
}

void check_output_path(const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  K3_CHECK(fs::is_directory(dir, ec), "--json ", path, ": directory ", dir.string(), " does not exist");
  K3_CHECK(!fs::is_directory(p, ec), "--json ", path, ": is a directory");
}

// The public MPI fork of the C engine: the real K3 over 16 and 32 sockets, 2 x Xeon Platinum
// 8592+ per node, NDR InfiniBand, exact fp32, batch 1 (published ms per token).  Per-socket
// memory bandwidth, fp32 peak and the network's latency are not published, and are assumed.
constexpr double kAnchorMemGbps = 215;     // assumed: 8 channels of DDR5-5600 (358 GB/s) at ~60%
constexpr double kAnchorGflops = 7800;     // assumed: 64 cores x 64 fp32 FLOP/cycle x ~1.9 GHz
constexpr int kAnchorRanksPerNode = 2;
constexpr double kAnchorNetGbps = 50;      // NDR: 400 Gb/s per node
constexpr double kAnchorNetLatencyUs = 2;  // assumed: one MPI message between nodes
constexpr double kAnchorShmLatencyUs = 1;  // assumed: one message between the sockets of a node
struct AnchorPoint {
  int ranks;
  double ms_per_token;
};
constexpr AnchorPoint kAnchorPublished[] = {{16, 56.0}, {32, 47.6}};

struct Args {
  std::string model, budgets, json, preset, probe_bytes = "4G", ram;
  // Several ranks (mpirun): the rank counts, the cluster's figures or its preset.
  std::string ranks, cluster_preset;
  int ranks_per_node = 1;
  double net_gbps = 0, net_latency_us = 0, shm_latency_us = 0.5;
  // Not given: 0 (the options' checks refuse 0), -1 for the hit rate.
  double disk_gbps = 0, mem_gbps = 0, gflops = 0, hit_rate = -1;
  int cores = 0;
  double bf16_eff = 0.9, mxfp4_eff = 0.5, prefill_eff = 0.6;
  int prompt_tokens = 512, chunk_tokens = static_cast<int>(kPrefillChunk);
};

// k3 plan --ranks R[,R...]: the latency layout over R ranks (perf/cluster_plan.h).
int plan_ranks(const Args& a) {
  K3_CHECK(a.cluster_preset.empty() || a.cluster_preset == "xeon-8592-ndr", "--preset-cluster: unknown cluster '",
           a.cluster_preset, "' (known: xeon-8592-ndr)");
  const bool anchor = !a.cluster_preset.empty();
  std::vector<int> counts;
  std::vector<std::string> items;
  for (size_t pos = 0; pos <= a.ranks.size();) {
    const size_t end = std::min(a.ranks.find(',', pos), a.ranks.size());
    items.push_back(a.ranks.substr(pos, end - pos));
    pos = end + 1;
  }
  for (const std::string& t : items) {
    char* end = nullptr;
    const long r = std::strtol(t.c_str(), &end, 10);
    K3_CHECK(end != nullptr && *end == '\0' && r >= 1 && r <= 65536, "--ranks: '", t,
             "' is not a rank count from 1 to 65536");
    counts.push_back(static_cast<int>(r));
  }
  K3_CHECK(!counts.empty(), "--ranks: no rank count given");
  const std::string dir = resolve_model_dir(a.model);
  ModelOptions options;
  options.headers_only = true;
  auto model = Model::load(dir, options);
  const ModelFigures mf = model_figures(model->config(), model->weights(), model->checkpoint());

  MachineFigures hw;
  hw.bf16_gemv_eff = a.bf16_eff;
  hw.mxfp4_gemv_eff = a.mxfp4_eff;
  hw.prefill_eff = a.prefill_eff;
  ClusterFigures cl;
  cl.ranks_per_node = a.ranks_per_node;
  cl.net_gbps = a.net_gbps;
  cl.net_latency_us = a.net_latency_us;
  cl.shm_latency_us = a.shm_latency_us;
  std::string src = "given";
  if (anchor) {
    hw.mem_gbps = kAnchorMemGbps;
    hw.fp32_gflops = kAnchorGflops;
    cl.ranks_per_node = kAnchorRanksPerNode;
    cl.net_gbps = kAnchorNetGbps;
    cl.net_latency_us = kAnchorNetLatencyUs;
    cl.shm_latency_us = kAnchorShmLatencyUs;
    src = "the MPI C engine's cluster (--preset-cluster xeon-8592-ndr; memory, peak and latency assumed)";
  }
  if (a.mem_gbps > 0) hw.mem_gbps = a.mem_gbps;
  if (a.gflops > 0) hw.fp32_gflops = a.gflops;
  if (hw.mem_gbps == 0 || hw.fp32_gflops == 0) {  // this machine is one rank
    ThreadPool& pool = global_pool();
    if (hw.mem_gbps == 0) {
      MachineLimits lim;
      measure_read_bandwidth(pool, &lim, 3);
      hw.mem_gbps = lim.read_gbps_max;
    }
    if (hw.fp32_gflops == 0) hw.fp32_gflops = measure_fp32_peak_once(pool);
    src = "this machine as one rank (measured)";
  }
  PlanOptions po;
  po.prompt_tokens = a.prompt_tokens;
  po.chunk_tokens = a.chunk_tokens;
  std::printf("checkpoint   %s: %s active parameters per token\n", dir.c_str(),
              human_count(static_cast<double>(mf.active_params())).c_str());
  std::printf("per rank     memory %s GB/s, fp32 %s GFLOP/s; bf16 GEMV at %.2f, MXFP4 at %.2f of memory bandwidth (%s)\n",
              sig3(hw.mem_gbps).c_str(), sig3(hw.fp32_gflops).c_str(), hw.bf16_gemv_eff, hw.mxfp4_gemv_eff, src.c_str());
  std::printf("cluster      %d rank(s) per node; network %s GB/s, %s us per message; %s us within a node\n",
              cl.ranks_per_node, sig3(cl.net_gbps).c_str(), sig3(cl.net_latency_us).c_str(),
              sig3(cl.shm_latency_us).c_str());
  std::printf("layout       latency: every product split by output rows over the ranks, outputs all-gathered; "
              "attention and the KDA state on every rank\n\n");
  std::printf("%6s %6s %12s %10s %9s %10s %12s %11s %11s %11s %10s %11s", "ranks", "nodes", "decode ms/t", "tokens/s",
              "weights", "KDA state", "exchanges", "read/token", "sent/token", "node in", "exch/token", "prefill t/s");
  if (anchor) std::printf(" %12s %8s", "published ms", "k3/pub");
  std::printf("\n");
  for (int r : counts) {
    cl.ranks = r;
    RankFootprint busiest;
    for (int k = 0; k < r; ++k) {
      const RankFootprint f = rank_footprint(model->weights(), model->text(), k, r);
      if (k == 0 || f.read_per_token > busiest.read_per_token) busiest = f;
    }
    const ClusterPlan p = plan_cluster(busiest, mf, hw, cl, po);
      std::printf("%6d %6d %12s %10s %9s %10s %12s %11s %11s %11s %10llu %11s", r, p.nodes,
                sig3(p.decode_seconds * 1e3).c_str(), sig3(p.decode_tokens_per_second).c_str(),
                percent(p.weights_s, p.decode_seconds).c_str(), percent(p.state_s, p.decode_seconds).c_str(),
                percent(p.exchange_latency_s + p.exchange_bytes_s, p.decode_seconds).c_str(),
                human_bytes(static_cast<double>(p.read_bytes)).c_str(), human_bytes(static_cast<double>(p.sent_bytes)).c_str(),
                human_bytes(static_cast<double>(p.node_inbound_bytes)).c_str(),
                static_cast<unsigned long long>(p.exchanges), sig3(p.prefill_tokens_per_second).c_str());
    if (anchor)
      for (const AnchorPoint& pub : kAnchorPublished)
        if (pub.ranks == r)
          std::printf(" %12s %8s", sig3(pub.ms_per_token).c_str(), sig3(p.decode_seconds * 1e3 / pub.ms_per_token).c_str());
    std::printf("\n");
  }
  if (anchor)
    std::printf("\npublished: the MPI fork of the C engine on the real K3 (its own tensor-parallel layout over one-sided "
                "MPI); k3/pub = k3's predicted time over the published one\n");
  return 0;
}

int plan(const Args& a) {
  if (!a.ranks.empty() || !a.cluster_preset.empty()) return plan_ranks(a);
  K3_CHECK(a.preset.empty() || a.preset == "c-engine", "--preset-machine: unknown machine '", a.preset,
           "' (known: c-engine)");
  check_output_path(a.json);
  const bool c_engine = a.preset == "c-engine";
  const std::string dir = resolve_model_dir(a.model);
  ModelOptions options;
  options.headers_only = true;  // headers and small tensors only: no weight bytes are read
  auto model = Model::load(dir, options);
  const ModelFigures mf = model_figures(model->config(), model->weights(), model->checkpoint());
  const WeightStoreStats sizes = WeightStore::layout(model->checkpoint(), model->weights(), model->text(), 0);
  const std::vector<Budget> budgets =
      parse_budgets(!a.budgets.empty() ? a.budgets : c_engine ? kCEngineBudgets : "8G,32G,64G,trunk,all", sizes);

  // The machine: given figures first, then the preset's, then measured here.
  MachineFigures hw;
  hw.bf16_gemv_eff = a.bf16_eff;
  hw.mxfp4_gemv_eff = a.mxfp4_eff;
  hw.prefill_eff = a.prefill_eff;
  std::string disk_src = "given", mem_src = "given", flops_src = "given";
  if (c_engine) {
    hw.disk_gbps = kCEngineDiskGbps;
    hw.mem_gbps = kCEngineMemGbps;
    hw.fp32_gflops = kCEngineGflops;
    hw.cores = kCEngineCores;
    hw.ram_bytes = kCEngineRam;
    disk_src = "published";
    mem_src = "assumed: 2 sockets of 8-channel DDR at ~60% of peak";
    flops_src = "assumed: 124 cores x 32 FP32 FLOP/cycle x ~1.5 GHz";
  }
  if (a.disk_gbps > 0) {
    hw.disk_gbps = a.disk_gbps;
    disk_src = "given";
  }
  if (a.mem_gbps > 0) {
    hw.mem_gbps = a.mem_gbps;
    mem_src = "given";
  }
  if (a.gflops > 0) {
    hw.fp32_gflops = a.gflops;
    flops_src = "given";
  }
  const bool measure_disk = hw.disk_gbps == 0, measure_mem = hw.mem_gbps == 0, measure_flops = hw.fp32_gflops == 0;
  if (!a.ram.empty()) {
    hw.ram_bytes = parse_byte_size(a.ram);
  } else if (measure_disk && measure_mem && measure_flops && a.cores == 0) {
    hw.ram_bytes = available_memory_bytes();  // the figures describe this machine
  }
  if (a.cores > 0) hw.cores = a.cores;
  if (measure_disk) {
    DiskProbeOptions po;
    po.max_bytes = parse_byte_size(a.probe_bytes);
    K3_CHECK(po.max_bytes > 0, "--probe-bytes: must be more than 0 bytes (got '", a.probe_bytes, "')");
    const DiskProbeResult d = probe_disk(model->checkpoint().shard_paths(), po);
    hw.disk_gbps = d.gbps;
    disk_src = cat("measured: ", human_bytes(static_cast<double>(d.bytes)), " of ", d.files, " shard file(s) in ",
                   sig3(d.seconds), " s, ", d.direct ? "O_DIRECT" : "page cache dropped (O_DIRECT refused)");
    if (d.hole_fraction > 0.01) {
      disk_src += cat(", ", percent(d.hole_fraction, 1.0), " file holes");
      log_warn("disk probe: ", percent(d.hole_fraction, 1.0), " of the bytes read were file holes (a sparse "
               "checkpoint): they read at memory speed, not the disk's; pass --disk-gbps for a real figure");
    }
    K3_CHECK(hw.disk_gbps > 0, "disk probe: read nothing from ", dir, "; pass --disk-gbps");
  }
  if (measure_mem || measure_flops) {
    ThreadPool& pool = global_pool();
    if (!hw.cores) hw.cores = pool.size();
    if (measure_mem) {
      MachineLimits lim;
      measure_read_bandwidth(pool, &lim, 3);
      // The fastest probe, as k3 bench's ratios use: on a shared machine the slower ones measure
      // the neighbours, not the memory the weights are read from.
      hw.mem_gbps = lim.read_gbps_max;
      mem_src = cat("measured, fastest of 3 probes, ", pool.size(), " threads");
    }
    if (measure_flops) {
      const double here = measure_fp32_peak_once(pool);
      K3_CHECK(here > 0, "cannot measure the fp32 peak on this CPU (no AVX2 FMA): pass --gflops");
      hw.fp32_gflops = here * hw.cores / pool.size();
      flops_src = hw.cores == pool.size() ? cat("measured, ", pool.size(), " threads")
                                          : cat("measured on ", pool.size(), " threads, scaled to ", hw.cores, " cores");
    }
  }

  PlanOptions po;
  po.hit_rate = a.hit_rate;
  po.prompt_tokens = a.prompt_tokens;
  po.chunk_tokens = a.chunk_tokens;

  std::vector<BudgetPlan> plans;
  for (const Budget& b : budgets)
    plans.push_back(plan_budget(WeightStore::layout(model->checkpoint(), model->weights(), model->text(), b.bytes), mf,
                                hw, po));

  // Header: what the prediction is of.
  const double N = static_cast<double>(sizes.expert_count);
  std::printf("checkpoint   %s: %s tensors, %s active parameters per token\n", dir.c_str(),
              std::to_string(mf.tensor_count).c_str(), human_count(static_cast<double>(mf.active_params())).c_str());
  std::printf("weights      trunk %s (largest unit %s), %lld routed experts of %s (%s); at least %s to run\n",
              human_bytes(static_cast<double>(sizes.trunk_bytes)).c_str(),
              human_bytes(static_cast<double>(sizes.largest_unit)).c_str(), static_cast<long long>(sizes.expert_count),
              human_bytes(N > 0 ? static_cast<double>(sizes.expert_bytes_total) / N : 0.0).c_str(),
              human_bytes(static_cast<double>(sizes.expert_bytes_total)).c_str(),
              human_bytes(static_cast<double>(sizes.minimum_budget)).c_str());
  std::printf("machine      %s%sdisk %s GB/s (%s); memory %s GB/s (%s); fp32 %s GFLOP/s (%s)%s\n",
              c_engine ? "the C engine's published setup (--preset-machine c-engine): " : "",
              hw.cores ? cat(hw.cores, " cores; ").c_str() : "", sig3(hw.disk_gbps).c_str(), disk_src.c_str(), sig3(hw.mem_gbps).c_str(),
              mem_src.c_str(), sig3(hw.fp32_gflops).c_str(), flops_src.c_str(),
              hw.ram_bytes ? cat("; RAM ", human_bytes(static_cast<double>(hw.ram_bytes))).c_str() : "");
  std::printf("model        bf16 GEMV at %.2f and MXFP4 expert GEMV at %.2f of memory bandwidth, prefill at %.2f of "
              "fp32 peak; routing %s\n",
              hw.bf16_gemv_eff, hw.mxfp4_gemv_eff, hw.prefill_eff,
              a.hit_rate >= 0 ? cat("with hit rate ", a.hit_rate, " (--hit-rate)").c_str()
                         : "uniform (hit rate = slots / experts)");
  if (!plans.empty()) {
    // The overhead does not depend on the budget.
    const BudgetPlan& o = plans.front();
    std::printf("peak RSS     weights in use + %s: %llu tensors x %llu B metadata (%s) + one sequence's state "
                "(KDA %s + MLA cache of %d tokens %s) + activations of a %d-token chunk (%s) + process %s\n",
                human_bytes(static_cast<double>(o.overhead_bytes)).c_str(),
                static_cast<unsigned long long>(mf.tensor_count),
                static_cast<unsigned long long>(po.metadata_bytes_per_tensor),
                human_bytes(static_cast<double>(o.metadata_bytes)).c_str(),
                human_bytes(static_cast<double>(mf.sequence_state_bytes)).c_str(), po.prompt_tokens,
                human_bytes(static_cast<double>(mf.context_bytes_per_token) * po.prompt_tokens).c_str(),
                std::min(po.chunk_tokens, po.prompt_tokens), human_bytes(static_cast<double>(o.activation_bytes)).c_str(),
                human_bytes(static_cast<double>(o.process_bytes)).c_str());
  }
  std::printf("prefill      a %d-token prompt in chunks of %d\n\n", po.prompt_tokens, po.chunk_tokens);

  auto published = [&](const Budget& b) -> const Published* {
    if (!c_engine) return nullptr;
    for (const Published& p : kCEnginePublished)
      if (b.trunk ? p.budget == 0 : p.budget == b.bytes) return &p;
    return nullptr;
  };
  std::printf("%-18s %-44s %6s %10s %9s %5s %5s %5s %11s %11s", "budget", "placement", "hit", "decode t/s", "s/token",
              "disk", "mem", "cpu", "prefill t/s", "peak RSS");
  if (c_engine) std::printf(" %12s %7s", "C engine s/t", "k3 / C");
  std::printf("\n");
  for (size_t i = 0; i < plans.size(); ++i) {
    const Budget& b = budgets[i];
    const BudgetPlan& p = plans[i];
    const std::string label = b.label + (b.label == "trunk" || b.label == "all"
                                             ? " (" + human_bytes(static_cast<double>(b.bytes)) + ")"
                                             : "");
    if (!p.feasible) {
      std::printf("%-18s below the minimum: the store needs at least %s (its largest unit %s + the minimal expert "
                  "cache)\n",
                  label.c_str(), human_bytes(static_cast<double>(p.layout.minimum_budget)).c_str(),
                  human_bytes(static_cast<double>(p.layout.largest_unit)).c_str());
      continue;
    }
    const std::string placement =
        (p.layout.trunk_resident
             ? std::string("trunk resident")
             : "trunk " + human_bytes(static_cast<double>(p.layout.trunk_resident_bytes)) + " resident, rest via " +
                   human_bytes(static_cast<double>(p.layout.ring_bytes)) + " ring") +
        ", " + std::to_string(p.layout.expert_slots) + " slots" + (p.exceeds_ram ? " > RAM" : "");
    std::printf("%-18s %-44s %6s %10s %9s %5s %5s %5s %11s %11s", label.c_str(), placement.c_str(),
                hit_percent(p.hit_rate).c_str(), sig3(p.decode_tokens_per_second).c_str(),
                sig3(p.decode_seconds).c_str(), percent(p.decode.disk, p.decode_seconds).c_str(),
                percent(p.decode.memory, p.decode_seconds).c_str(), percent(p.decode.compute, p.decode_seconds).c_str(),
                sig3(p.prefill_tokens_per_second).c_str(), human_bytes(static_cast<double>(p.peak_rss_bytes)).c_str());
    if (const Published* pub = published(b))
      std::printf(" %12s %6sx", sig3(pub->seconds_per_token).c_str(), sig3(pub->seconds_per_token / p.decode_seconds).c_str());
    std::printf("\n");
  }
  for (const BudgetPlan& p : plans) {
    if (!p.feasible || p.layout.trunk_resident) continue;
    std::printf("\nstreamed trunk: the part of the %s trunk that is not resident is read from disk for every token "
                "(all of it: %s s at %s GB/s); %s or more keeps it all resident\n",
                human_bytes(static_cast<double>(sizes.trunk_bytes)).c_str(),
                sig3(static_cast<double>(sizes.trunk_bytes) / (hw.disk_gbps * 1e9)).c_str(), sig3(hw.disk_gbps).c_str(),
                human_bytes(static_cast<double>(trunk_resident_budget(sizes))).c_str());
    break;
  }
  if (c_engine)
    std::printf("%sC engine: published seconds per token on the real model (peak RSS %.2f GB at 8 GB); k3 / C = "
                "the C engine's time over k3's predicted time (> 1: k3 faster)\n",
                std::any_of(plans.begin(), plans.end(), [](const BudgetPlan& p) { return p.feasible && !p.layout.trunk_resident; }) ? "" : "\n",
                kCEnginePeakRssGb);

  if (!a.json.empty()) {
    nlohmann::json j;
    j["checkpoint"] = dir;
    j["model"] = {{"tensors", mf.tensor_count},
                  {"active_params", mf.active_params()},
                  {"trunk_params", mf.trunk_params},
                  {"expert_params", mf.expert_params},
                  {"top_k", mf.top_k},
                  {"moe_layers", mf.moe_layers},
                  {"experts_per_layer", mf.experts_per_layer},
                  {"trunk_bytes", sizes.trunk_bytes},
                  {"largest_unit_bytes", sizes.largest_unit},
                  {"expert_count", sizes.expert_count},
                  {"expert_bytes_total", sizes.expert_bytes_total},
                  {"expert_slot_bytes", sizes.expert_slot_bytes},
                  {"minimum_budget", sizes.minimum_budget}};
    j["machine"] = {{"preset", a.preset},
                    {"cores", hw.cores},
                    {"disk_gbps", hw.disk_gbps},
                    {"disk_source", disk_src},
                    {"mem_gbps", hw.mem_gbps},
                    {"mem_source", mem_src},
                    {"fp32_gflops", hw.fp32_gflops},
                    {"fp32_source", flops_src},
                    {"bf16_gemv_eff", hw.bf16_gemv_eff},
                    {"mxfp4_gemv_eff", hw.mxfp4_gemv_eff},
                    {"prefill_eff", hw.prefill_eff},
                    {"ram_bytes", hw.ram_bytes}};
    j["prompt_tokens"] = po.prompt_tokens;
    j["chunk_tokens"] = po.chunk_tokens;
    nlohmann::json rows = nlohmann::json::array();
    for (size_t i = 0; i < plans.size(); ++i) {
      const BudgetPlan& p = plans[i];
      nlohmann::json r = {{"label", budgets[i].label}, {"budget", p.budget}, {"feasible", p.feasible},
                          {"minimum_budget", p.layout.minimum_budget}};
      if (p.feasible) {
        r["trunk_resident"] = p.layout.trunk_resident;
        r["ring_bytes"] = p.layout.ring_bytes;
        r["expert_slots"] = p.layout.expert_slots;
        r["hit_rate"] = p.hit_rate;
        r["expert_misses_per_token"] = p.expert_misses_per_token;
        r["disk_bytes_per_token"] = p.disk_bytes_per_token;
        r["decode_seconds"] = p.decode_seconds;
        r["decode_tokens_per_second"] = p.decode_tokens_per_second;
        r["decode_split_seconds"] = {{"disk", p.decode.disk}, {"memory", p.decode.memory}, {"compute", p.decode.compute}};
        r["prefill_seconds"] = p.prefill_seconds;
        r["prefill_tokens_per_second"] = p.prefill_tokens_per_second;
        r["prefill_split_seconds"] = {
            {"disk", p.prefill.disk}, {"memory", p.prefill.memory}, {"compute", p.prefill.compute}};
        r["weight_bytes"] = p.weight_bytes;
        r["overhead_bytes"] = p.overhead_bytes;
        r["peak_rss_bytes"] = p.peak_rss_bytes;
        r["exceeds_ram"] = p.exceeds_ram;
        if (const Published* pub = published(budgets[i])) r["c_engine_seconds_per_token"] = pub->seconds_per_token;
      }
      rows.push_back(r);
    }
    j["budgets"] = rows;
    std::ofstream out(a.json, std::ios::binary);
    out << j.dump(2) << "\n";
    if (!out) fail("--json ", a.json, ": cannot write");
  }
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, Runner& run) {
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "plan", "Predict decode / prefill speed, expert cache hit rate and peak RSS of streamed weights at memory "
              "budgets, on this machine (measured) or another (given figures)");
  sub->add_option("--model", a->model, "Checkpoint (default: the built-in tiny model); headers are read, no weights")
      ->check(kNonEmpty);
  sub->add_option("--budget", a->budgets,
                  "Budgets, comma-separated: sizes (8G, 512M, 40%), 'trunk' (the smallest that keeps the trunk "
                  "resident) or 'all' (every weight fits) (default: 8G,32G,64G,trunk,all; with the c-engine "
                  "preset 8G,32G,64G,trunk)");
  sub->add_option("--disk-gbps", a->disk_gbps, "Disk read bandwidth, GB/s (default: probed on the checkpoint's files)")
      ->check(kPositive);
  sub->add_option("--mem-gbps", a->mem_gbps, "Memory read bandwidth, all cores, GB/s (default: measured)")
      ->check(kPositive);
  sub->add_option("--gflops", a->gflops, "fp32 peak, all cores, GFLOP/s (default: measured)")->check(kPositive);
  sub->add_option("--cores", a->cores,
                  "Cores of the machine described (default: the CPUs k3 may use here); a measured fp32 peak is "
                  "scaled to it")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--ram", a->ram, "Memory of the machine described, e.g. 720G (budgets past it are flagged)");
  sub->add_option("--hit-rate", a->hit_rate,
                  "Expert cache hit rate when not every expert fits (default: uniform routing, slots / experts)")
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--prompt-tokens", a->prompt_tokens, "Prompt length for the prefill figure (default 512)")
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--chunk-tokens", a->chunk_tokens, "Prefill chunk, as k3 generate (k3 serve steps in 256)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--bf16-eff", a->bf16_eff, "bf16 GEMV speed as a fraction of memory bandwidth (default 0.9)")
      ->check(CLI::Range(0.01, 1.0));
  sub->add_option("--mxfp4-eff", a->mxfp4_eff, "MXFP4 expert GEMV speed as a fraction of memory bandwidth (default 0.5: exact fp32 decode of MXFP4 is "
                  "bound by instructions)")
      ->check(CLI::Range(0.01, 1.0));
  sub->add_option("--prefill-eff", a->prefill_eff, "Prefill GEMM speed as a fraction of fp32 peak (default 0.6)")
      ->check(CLI::Range(0.01, 1.0));
  sub->add_option("--probe-bytes", a->probe_bytes, "Bytes the disk probe reads from the shards (default 4G)");
  sub->add_option("--preset-machine", a->preset,
                  "c-engine: the public C engine's published setup for K3 (124 cores, 4.6 GB/s NVMe, 720 GB RAM) "
                  "with ASSUMED memory bandwidth 300 GB/s (2 sockets) and fp32 peak 6 TFLOP/s; prints its "
                  "published s/token (8 GB 26.5, 32 GB 24.2, 64 GB 19.8, trunk resident 5.59) beside k3's; "
                  "figures given explicitly override the preset's");
  sub->add_option("--json", a->json, "Also write the predictions as JSON");
  sub->add_option("--ranks", a->ranks,
                  "Predict one model over R ranks (mpirun -np R; one per socket), e.g. 16,32: batch-1 decode and "
                  "prefill of the latency layout, per rank and per token (instead of the budget table)");
  sub->add_option("--ranks-per-node", a->ranks_per_node, "Ranks sharing a node (default 1)")->check(kPositive);
  sub->add_option("--net-gbps", a->net_gbps, "Each node's network link, GB/s per direction")->check(kPositive);
  sub->add_option("--net-latency-us", a->net_latency_us, "One message between nodes, microseconds")->check(kPositive);
  sub->add_option("--shm-latency-us", a->shm_latency_us, "One message between ranks of a node, microseconds (default 0.5)")
      ->check(kPositive);
  sub->add_option("--preset-cluster", a->cluster_preset,
                  "xeon-8592-ndr: the cluster of the public MPI C engine's published K3 figures (2 x Xeon 8592+ "
                  "per node, NDR InfiniBand), for --ranks 16,32; figures given explicitly override the preset's");
  sub->callback([a, &run] { run = [a]() { return plan(*a); }; });
}

}  // namespace k3::cli
