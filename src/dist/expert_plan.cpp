#include "dist/expert_plan.h"

#include <algorithm>
#include <limits>
#include <mutex>

#include "base/error.h"

namespace k3::dist {

namespace {
Layout g_layout = Layout::kLatency;
int g_replicas = 0;

std::mutex g_stats_mutex;
PlanStats g_stats;
double g_sum_planned = 0, g_sum_home = 0;
}  // namespace

void record_plan(const PairPlan& home, const PairPlan& planned) {
  const std::lock_guard<std::mutex> lock(g_stats_mutex);
  const double h = home.imbalance(), p = planned.imbalance();
  ++g_stats.steps;
  g_sum_planned += p;
  g_sum_home += h;
  g_stats.worst_planned = std::max(g_stats.worst_planned, p);
  g_stats.worst_home = std::max(g_stats.worst_home, h);
  g_stats.mean_planned = g_sum_planned / static_cast<double>(g_stats.steps);
  g_stats.mean_home = g_sum_home / static_cast<double>(g_stats.steps);
}

PlanStats plan_stats() {
  const std::lock_guard<std::mutex> lock(g_stats_mutex);
  return g_stats;
}

void reset_plan_stats() {
  const std::lock_guard<std::mutex> lock(g_stats_mutex);
  g_stats = {};
  g_sum_planned = g_sum_home = 0;
}

Layout parse_layout(const std::string& s) {
  if (s == "latency") return Layout::kLatency;
  if (s == "throughput") return Layout::kThroughput;
  throw Error(cat("--layout: expected latency or throughput, got '", s, "'"));
}

const char* layout_name(Layout l) { return l == Layout::kLatency ? "latency" : "throughput"; }

void set_default_layout(Layout l) { g_layout = l; }
Layout default_layout() { return g_layout; }
void set_default_expert_replicas(int n) { g_replicas = n; }
int default_expert_replicas() { return g_replicas; }

ExpertPlacement::ExpertPlacement(int experts, int ranks, int replicas)
    : experts_(experts), ranks_(ranks), replicas_(replicas) {
  K3_CHECK(ranks >= 1, "internal error: an expert placement over ", ranks, " ranks");
  K3_CHECK(replicas >= 0 && replicas < ranks, "--expert-replicas: ", replicas, " extra copies of each expert need ",
           "between 0 and ", ranks - 1, " other ranks to hold them (this run has ", ranks, " rank",
           ranks == 1 ? "" : "s", ")");
}

int ExpertPlacement::experts_held(int rank) const {
  int n = 0;
  for (int e = 0; e < experts_; ++e) n += holds(rank, e) ? 1 : 0;
  return n;
}

double PairPlan::imbalance() const {
  if (pairs == 0 || load.empty()) return 1.0;
  const int64_t most = *std::max_element(load.begin(), load.end());
  return static_cast<double>(most) * static_cast<double>(load.size()) / static_cast<double>(pairs);
}

PairPlan plan_pairs(const ExpertPlacement& p, std::span<const int32_t> sel, bool balance) {
  const int E = p.experts(), R = p.ranks(), H = p.replicas() + 1;
  PairPlan plan;
  plan.run.assign(static_cast<size_t>(E), std::vector<int64_t>(static_cast<size_t>(H), 0));
  plan.load.assign(static_cast<size_t>(R), 0);
  std::vector<int64_t> count(static_cast<size_t>(E), 0);
  for (int32_t e : sel) {
    K3_CHECK(e >= 0 && e < E, "internal error: a routed expert ", e, " outside [0, ", E, ")");
    ++count[static_cast<size_t>(e)];
  }
  plan.pairs = static_cast<int64_t>(sel.size());
  auto load = [&](int e, int j) -> int64_t& { return plan.load[static_cast<size_t>(p.holder(e, j))]; };

  if (!balance || H == 1) {
    for (int e = 0; e < E; ++e) {
      plan.run[static_cast<size_t>(e)][0] = count[static_cast<size_t>(e)];
      load(e, 0) += count[static_cast<size_t>(e)];
    }
    return plan;
  }

  // Largest experts first, each to its least-loaded holder (the home on ties) up to the mean,
  // then spilling to the next least-loaded holder: experts stay whole where the mean allows.
  const int64_t target = (plan.pairs + R - 1) / R;
  std::vector<int> order;
  for (int e = 0; e < E; ++e)
    if (count[static_cast<size_t>(e)] > 0) order.push_back(e);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return count[static_cast<size_t>(a)] > count[static_cast<size_t>(b)]; });
  for (int e : order) {
    int64_t remaining = count[static_cast<size_t>(e)];
    while (remaining > 0) {
      int u = 0;
      for (int j = 1; j < H; ++j)
        if (load(e, j) < load(e, u)) u = j;
      int64_t second = std::numeric_limits<int64_t>::max();
      for (int j = 0; j < H; ++j)
        if (j != u) second = std::min(second, load(e, j));
      const int64_t room = load(e, u) < target ? target - load(e, u) : std::max<int64_t>(1, second - load(e, u) + 1);
      const int64_t take = std::min(remaining, room);
      plan.run[static_cast<size_t>(e)][static_cast<size_t>(u)] += take;
      load(e, u) += take;
      remaining -= take;
    }
  }

  // Then single pairs move off a busiest rank while one of their expert's holders is at least
  // two below it.
  for (int64_t step = 0; step < plan.pairs + 2 * E + R; ++step) {
    const int64_t most = *std::max_element(plan.load.begin(), plan.load.end());
    bool moved = false;
    for (int a = 0; a < R && !moved; ++a) {
      if (plan.load[static_cast<size_t>(a)] != most) continue;
      for (int e = 0; e < E && !moved; ++e) {
        if (!p.holds(a, e)) continue;
        const int ja = (a - p.home(e) + R) % R;
        if (plan.run[static_cast<size_t>(e)][static_cast<size_t>(ja)] == 0) continue;
        int best = -1;
        for (int j = 0; j < H; ++j)
          if (j != ja && load(e, j) + 2 <= most && (best < 0 || load(e, j) < load(e, best))) best = j;
        if (best < 0) continue;
        --plan.run[static_cast<size_t>(e)][static_cast<size_t>(ja)];
        --plan.load[static_cast<size_t>(a)];
        ++plan.run[static_cast<size_t>(e)][static_cast<size_t>(best)];
        ++load(e, best);
        moved = true;
      }
    }
    if (!moved) break;
  }
  return plan;
}

}  // namespace k3::dist
