// The phase profile charges wall time to the innermost open phase.
#include "base/profile.h"

#include <gtest/gtest.h>

#include <chrono>

namespace k3 {
namespace {

void busy_for(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
  }
}

size_t idx(Phase p) { return static_cast<size_t>(p); }

TEST(Profile, NestedPhaseTimeGoesToTheInnerPhaseOnly) {
  profile_reset();
  profile_enable(true);
  const auto t0 = std::chrono::steady_clock::now();
  {
    ScopedPhase outer(Phase::kExperts);
    busy_for(0.02);
    {
      ScopedPhase inner(Phase::kShared);
      busy_for(0.06);
    }
    busy_for(0.02);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  profile_enable(false);
  const PhaseTimes t = profile_snapshot();
  const double outer = t.seconds[idx(Phase::kExperts)], inner = t.seconds[idx(Phase::kShared)];
  EXPECT_GE(inner, 0.06);
  EXPECT_GE(outer, 0.04);
  // Together they are the scope's wall time: the inner 60 ms is not charged to the outer phase
  // as well (which would put the sum 120 ms above it).  The margin only absorbs a preemption
  // between the clock reads.
  EXPECT_NEAR(outer + inner, wall, 0.02);
  EXPECT_NEAR(t.total(), outer + inner, 1e-9);
  profile_reset();
}

TEST(Profile, DisabledRecordsNothing) {
  profile_reset();
  profile_enable(false);
  {
    ScopedPhase p(Phase::kKda);
    busy_for(0.005);
  }
  EXPECT_EQ(profile_snapshot().total(), 0.0);
}

}  // namespace
}  // namespace k3
