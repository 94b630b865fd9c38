// ISA selection: forcing levels, clamping to what the CPU has, parsing names.
#include <gtest/gtest.h>

#include <algorithm>

#include "base/cpu_features.h"
#include "base/error.h"

namespace k3 {
namespace {

TEST(CpuFeatures, ForceIsClampedToTheHardware) {
  const Isa saved = active_isa();
  EXPECT_EQ(force_isa(Isa::kRef), Isa::kRef);
  EXPECT_EQ(active_isa(), Isa::kRef);
  EXPECT_EQ(force_isa(Isa::kAmx), best_isa());
  EXPECT_EQ(force_isa(Isa::kAvx512), std::min(best_isa(), Isa::kAvx512));
  force_isa(saved);
  if (best_isa() >= Isa::kAvx512) {
    EXPECT_TRUE(cpu_features().avx512f);
  }
  if (best_isa() == Isa::kAmx) {
    EXPECT_TRUE(cpu_features().amx_tile && cpu_features().amx_bf16 && cpu_features().avx512_bf16);
  }
  if (best_isa() >= Isa::kAvx2) {
    EXPECT_TRUE(cpu_features().avx2 && cpu_features().fma);
  }
  EXPECT_FALSE(cpu_features_summary().empty());
}

TEST(CpuFeatures, ParsesNames) {
  EXPECT_EQ(parse_isa("ref"), Isa::kRef);
  EXPECT_EQ(parse_isa("avx2"), Isa::kAvx2);
  EXPECT_EQ(parse_isa("avx512"), Isa::kAvx512);
  EXPECT_EQ(parse_isa("amx"), Isa::kAmx);
  EXPECT_STREQ(isa_name(Isa::kAmx), "amx");
  EXPECT_THROW(parse_isa("neon"), Error);
  EXPECT_STREQ(isa_name(Isa::kAvx2), "avx2");
}

}  // namespace
}  // namespace k3
