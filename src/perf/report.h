// `k3 bench` output: a readable table, a JSON document (names used by external checks:
// machine.read_gbps, machine.peak_gflops, kernels[].{name,value,unit,ratio_to_limit},
// model.decode_tokens_per_s, model.decode_roofline_ratio, model.prefill_tokens_per_s), and an
// SVG bar chart of every figure's ratio to its limit.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "perf/kernel_bench.h"
#include "perf/machine.h"
#include "perf/model_bench.h"

namespace k3 {

struct BenchReport {
  MachineLimits machine;
  std::vector<BenchResult> kernels;
  std::optional<ModelBenchResult> model;
};

// Re-bases every bandwidth and fp32-peak ratio (kernels, decode and prefill rooflines) on the
// highest probe of the whole run.  The hardware's limits do not change during a run, only the
// VM's state does (other tenants), so the best probe is the closest to the real limit and a slow
// spell around one figure cannot push its ratio up (or past 100%).
void apply_best_limits(BenchReport& r);

std::string format_table(const BenchReport& r);
nlohmann::json to_json(const BenchReport& r);
std::string render_svg(const BenchReport& r);

}  // namespace k3
