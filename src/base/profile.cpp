#include "base/profile.h"

#include <atomic>
#include <chrono>
#include <mutex>

namespace k3 {
namespace {

std::atomic<bool> g_enabled{false};
std::mutex g_mu;
PhaseTimes g_times;
thread_local Phase t_current = Phase::kCount;  // kCount: no phase open

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

const char* phase_name(Phase p) {
  static const char* names[] = {"embed", "attn_res", "norm", "kda", "mla", "router", "experts", "shared", "dense_mlp", "lm_head"};
  return p < Phase::kCount ? names[static_cast<int>(p)] : "?";
}

double PhaseTimes::total() const {
  double t = 0;
  for (double s : seconds) t += s;
  return t;
}

void profile_enable(bool on) { g_enabled.store(on, std::memory_order_relaxed); }
bool profile_enabled() { return g_enabled.load(std::memory_order_relaxed); }
void profile_reset() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_times = PhaseTimes{};
}
PhaseTimes profile_snapshot() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_times;
}

ScopedPhase::ScopedPhase(Phase p) : phase_(p), outer_(t_current) {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  active_ = true;
  start_ = now();
  if (outer_ != Phase::kCount) {  // pause the enclosing phase: it loses [start_, end)
    std::lock_guard<std::mutex> lock(g_mu);
    g_times.seconds[static_cast<size_t>(outer_)] += start_;
  }
  t_current = p;
}

ScopedPhase::~ScopedPhase() {
  if (!active_) return;
  const double end = now();
  std::lock_guard<std::mutex> lock(g_mu);
  g_times.seconds[static_cast<size_t>(phase_)] += end - start_;
  if (outer_ != Phase::kCount) g_times.seconds[static_cast<size_t>(outer_)] -= end;
  t_current = outer_;
}

}  // namespace k3
