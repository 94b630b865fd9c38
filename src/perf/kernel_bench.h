// Per-kernel figures at real Kimi K3 shapes, with working sets larger than the last-level
// cache (many matrices / experts / states rotated), each reported as GB/s or GFLOP/s and as a
// ratio to the measured machine limit (performance.md).
#pragma once

#include <string>
#include <vector>

#include "perf/machine.h"

namespace k3 {

struct BenchResult {
  std::string name;
  double value = 0;  // median
  double min = 0, max = 0;
  std::string unit;  // "GB/s", "GFLOP/s", "tokens/s"
  double ratio_to_limit = 0;
  std::string limit;  // what the ratio is against
  std::string note;
  // Which machine limit the ratio is against and the value used; apply_best_limits() re-bases
  // kRead and kFp32 figures on the highest probe of the whole run.
  enum class Limit { kOther, kRead, kFp32 } limit_kind = Limit::kOther;
  double limit_value = 0;
  std::string limit_detail;  // kept after the limit when it is re-based, e.g. how FLOPs are counted
  // Bandwidth figures: the fastest streaming read of the figure's own buffers (the rotated
  // matrices or states), probed around its runs; one of the probes the limit is the best of.
  double own_read_gbps = 0;
};

struct KernelBenchOptions {
  int reps = 5;
  bool quick = false;  // smaller working sets and fewer cases (for tests and smoke runs)
  std::string filter;  // run only the groups kernel_bench_selects() picks for it
};

// The kernel figure groups, in the order they run: bf16_gemv, mxfp4_gemv, mxfp4_gemm, gemm, kda,
// mla.  Every figure's name starts with its group's.
const std::vector<std::string>& kernel_bench_groups();
// Whether `filter` picks `group`: empty, a part of the group's name ("gemv": both GEMV groups),
// or a name that starts with the group's (a figure name from a report, e.g.
// "gemm_bf16_7168x12288_n256" or "kda_decode").
bool kernel_bench_selects(const std::string& filter, const std::string& group);

std::vector<BenchResult> run_kernel_benches(ThreadPool& pool, const MachineLimits& limits,
                                            const KernelBenchOptions& options);

}  // namespace k3
