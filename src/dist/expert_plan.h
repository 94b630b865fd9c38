// The two ways a multi-rank run places the routed experts (docs/architecture.md, "Several
// ranks"):
//
// - latency layout (default): every expert, like every trunk matrix, is split by output rows
//   over all ranks (dist/row_split.h); balance is perfect by construction, which suits decode
//   of one or a few streams;
// - throughput layout: expert e lives whole on its home rank e % R and, with replicas, on the
//   next `replicas` ranks too (expert parallelism).  The trunk stays row-split, so every rank
//   already holds every token's latent row after the latent down-projection and the dispatch
//   needs no message; each rank runs the (token, expert) pairs the step's plan gives it, the
//   ranks all-gather those outputs, and every rank sums each token's experts in expert-index
//   order in fp32: the same sum, in the same order, as one process.
//
// The plan (MoonEP's objective): every rank computes it from the replicated routing, so it
// needs no message either.  Without replicas each pair runs on its expert's home; with them,
// pairs spill to the replicas so that each rank's pair count is as close to the mean as the
// replicas allow (within one of it when every rank holds a copy).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace k3::dist {

enum class Layout { kLatency, kThroughput };

// "latency" or "throughput"; throws k3::Error naming the option otherwise.
Layout parse_layout(const std::string& s);
const char* layout_name(Layout l);
// The process-wide choice (--layout, --expert-replicas) that Model::load applies.
void set_default_layout(Layout l);
Layout default_layout();
void set_default_expert_replicas(int n);
int default_expert_replicas();

class ExpertPlacement {
 public:
  ExpertPlacement() = default;  // one rank: nothing is placed
  // Throws k3::Error when replicas is outside [0, ranks - 1].
  ExpertPlacement(int experts, int ranks, int replicas);

  // Whether the experts are spread over ranks (the throughput layout with R > 1).
  bool parallel() const { return ranks_ > 1; }
  int experts() const { return experts_; }
  int ranks() const { return ranks_; }
  int replicas() const { return replicas_; }
  int home(int e) const { return e % ranks_; }
  // Holder j (0: the home) of expert e, for j <= replicas().
  int holder(int e, int j) const { return (home(e) + j) % ranks_; }
  bool holds(int rank, int e) const { return (rank - home(e) + ranks_) % ranks_ <= replicas_; }
  int experts_held(int rank) const;

 private:
  int experts_ = 0, ranks_ = 1, replicas_ = 0;
};

// Where each (token, expert) pair of a step runs.  The pairs of expert e, taken in token order,
// are cut into consecutive runs, one per holder in holder order (home first); run[e][j] is the
// number of pairs holder j takes.
struct PairPlan {
  std::vector<std::vector<int64_t>> run;  // [experts][replicas + 1]
  std::vector<int64_t> load;              // [ranks]: pairs per rank
  int64_t pairs = 0;
  // max / mean of load (1 when there are no pairs).
  double imbalance() const;
};

// How balanced the plans of this process's steps were (the throughput layout's MoE layers,
// since the last reset): the mean and the worst of max / mean pairs per rank, with the plan and
// with every pair on its expert's home.  `k3 generate -v` and the server's exit log report them.
struct PlanStats {
  uint64_t steps = 0;
  double mean_planned = 0, worst_planned = 0;
  double mean_home = 0, worst_home = 0;
};
void record_plan(const PairPlan& home, const PairPlan& planned);
PlanStats plan_stats();
void reset_plan_stats();

// The plan for a step whose routing is `sel` (each entry an expert index, one per pair).
// balance = false: every pair on its expert's home (what the plan is measured against).
PairPlan plan_pairs(const ExpertPlacement& p, std::span<const int32_t> sel, bool balance = true);

}  // namespace k3::dist
