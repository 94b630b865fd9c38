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

std::string format_table(const BenchReport& r);
nlohmann::json to_json(const BenchReport& r);
std::string render_svg(const BenchReport& r);

}  // namespace k3
