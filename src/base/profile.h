// Per-phase wall-time accounting for `k3 bench`'s profile.  Off by default; when off, a
// ScopedPhase costs one relaxed atomic load.  Phases nest: time is charged to the innermost one.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace k3 {

enum class Phase { kEmbed, kAttnRes, kNorm, kKda, kMla, kRouter, kExperts, kShared, kDense, kLmHead, kCount };

const char* phase_name(Phase p);

struct PhaseTimes {
  std::array<double, static_cast<size_t>(Phase::kCount)> seconds{};
  double total() const;
};

void profile_enable(bool on);
bool profile_enabled();
void profile_reset();
PhaseTimes profile_snapshot();

class ScopedPhase {
 public:
  explicit ScopedPhase(Phase p);
  ~ScopedPhase();
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  Phase phase_;
  Phase outer_;
  double start_ = 0;
  bool active_ = false;
};

}  // namespace k3
