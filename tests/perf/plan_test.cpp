// The k3 plan model (perf/plan.h) on hand-made layouts: each term of the decode and prefill
// formulas, the hit rate and its cap, peak RSS, and the budget keywords against the weight
// store's own placement of a real (tiny) checkpoint.
#include <gtest/gtest.h>

#include <cmath>

#include "model/k3_model.h"
#include "perf/plan.h"
#include "support/test_support.h"

namespace k3 {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// A K3-like shape at small numbers: 4 MoE layers x 64 experts, top 8, 1 MiB experts, a 400 MiB
// trunk in units of at most 60 MiB.
ModelFigures model() {
  ModelFigures m;
  m.top_k = 8;
  m.moe_layers = 4;
  m.experts_per_layer = 64;
  m.trunk_params = 200 * kMiB;  // bf16: 2 bytes each
  m.expert_params = 2 * kMiB;   // MXFP4: ~0.5 byte each
  m.tensor_count = 1000;
  m.sequence_state_bytes = 10 * kMiB;
  m.context_bytes_per_token = 1024;
  m.activation_bytes_per_token = 4096;
  return m;
}

WeightStoreStats layout(bool resident, int slots, uint64_t budget = 0) {
  WeightStoreStats s;
  s.trunk_bytes = 400 * kMiB;
  s.largest_unit = 60 * kMiB;
  s.expert_slot_bytes = kMiB;
  s.expert_count = 4 * 64;
  s.expert_bytes_total = 256 * kMiB;
  s.minimum_budget = s.largest_unit + 16 * kMiB;
  s.trunk_resident = resident;
  s.trunk_resident_bytes = resident ? s.trunk_bytes : 0;
  s.ring_bytes = resident ? 0 : 120 * kMiB;
  s.expert_slots = slots;
  s.budget = budget ? budget : (resident ? s.trunk_bytes : s.ring_bytes) + slots * kMiB;
  return s;
}

MachineFigures machine(double disk = 2, double mem = 20, double gflops = 1e6) {
  MachineFigures hw;
  hw.disk_gbps = disk;
  hw.mem_gbps = mem;
  hw.fp32_gflops = gflops;  // high: the GEMVs are bound by memory
  return hw;
}

TEST(Plan, ResidentTrunkWithEveryExpertCachedIsMemoryBound) {
  MachineFigures hw = machine();
  hw.bf16_gemv_eff = hw.mxfp4_gemv_eff = 0.8;
  const BudgetPlan p = plan_budget(layout(true, 256), model(), hw);
  ASSERT_TRUE(p.feasible);
  EXPECT_EQ(p.hit_rate, 1.0);
  EXPECT_EQ(p.expert_misses_per_token, 0.0);
  EXPECT_EQ(p.decode.disk, 0.0);
  // Bytes per token: the trunk and top_k x MoE layers experts.
  const double bytes = 400.0 * kMiB + 8 * 4 * 1.0 * kMiB;
  EXPECT_NEAR(p.decode_tokens_per_second, 20e9 * 0.8 / bytes, 1e-9 * p.decode_tokens_per_second);
  // Memory is the bandwidth's share, compute what the efficiency adds.
  EXPECT_NEAR(p.decode.memory, bytes / 20e9, 1e-12);
  EXPECT_NEAR(p.decode.compute, bytes / (20e9 * 0.8) - bytes / 20e9, 1e-12);
  EXPECT_NEAR(p.decode.total(), p.decode_seconds, 1e-15);
}

TEST(Plan, DefaultEfficienciesWeighTrunkAndExpertsApart) {
  const BudgetPlan p = plan_budget(layout(true, 256), model(), machine());
  EXPECT_NEAR(p.decode_seconds, 400.0 * kMiB / (20e9 * 0.9) + 32.0 * kMiB / (20e9 * 0.5), 1e-12);
}

TEST(Plan, ExpertBoundTokensPerSecondFollowTheDisk) {
  // Resident trunk, a cache of 16 of 256 experts: 94% of the 32 expert reads per token miss.
  const WeightStoreStats s = layout(true, 16);
  const BudgetPlan fast = plan_budget(s, model(), machine(0.1));
  const BudgetPlan slow = plan_budget(s, model(), machine(0.05));
  EXPECT_NEAR(fast.hit_rate, 16.0 / 256, 1e-12);
  EXPECT_NEAR(fast.expert_misses_per_token, 32 * (1 - 16.0 / 256), 1e-9);
  EXPECT_GT(fast.decode.disk, 0.9 * fast.decode_seconds);
  const double ratio = slow.decode_tokens_per_second / fast.decode_tokens_per_second;
  EXPECT_GT(ratio, 0.5);
  EXPECT_LT(ratio, 0.6);
  EXPECT_NEAR(slow.decode.disk, 2 * fast.decode.disk, 1e-12);
}

TEST(Plan, ExpertReadsAndTheirProductsOverlap) {
  // 30 of 32 expert reads per token miss.  Slow disk: the reads bound the experts and their
  // GEMVs hide under them; fast disk: the GEMVs bound them and the reads hide.
  const WeightStoreStats s = layout(true, 16);
  const BudgetPlan slow = plan_budget(s, model(), machine(1.0));
  const double trunk = 400.0 * kMiB / (20e9 * 0.9);
  EXPECT_NEAR(slow.decode_seconds, trunk + 30.0 * kMiB / 1e9, 1e-12);
  const BudgetPlan fast = plan_budget(s, model(), machine(1000.0));
  EXPECT_EQ(fast.decode.disk, 0.0);
  EXPECT_NEAR(fast.decode_seconds, plan_budget(layout(true, 256), model(), machine(1000.0)).decode_seconds, 1e-15);
}

TEST(Plan, StreamedTrunkTakesTheLongerOfItsReadAndItsProducts) {
  // Slow disk: the trunk's read bounds it; fast disk: its GEMVs do (the read hides under them).
  const WeightStoreStats s = layout(false, 256);
  const BudgetPlan slow = plan_budget(s, model(), machine(1.0));
  EXPECT_NEAR(slow.decode.disk, 400.0 * kMiB / 1e9, 1e-12);
  EXPECT_NEAR(slow.disk_bytes_per_token, 400.0 * kMiB, 1e-3);
  const BudgetPlan fast = plan_budget(s, model(), machine(1000.0));
  EXPECT_EQ(fast.decode.disk, 0.0);
  EXPECT_NEAR(fast.decode_seconds, plan_budget(layout(true, 256), model(), machine(1000.0)).decode_seconds, 1e-15);
}

TEST(Plan, OnlyTheTrunkUnitsNotResidentAreReadPerToken) {
  // 300 of the 400 MiB trunk resident: 100 MiB from disk per token, a quarter of the full stream.
  WeightStoreStats s = layout(false, 256);
  s.trunk_resident_bytes = 300 * kMiB;
  const BudgetPlan part = plan_budget(s, model(), machine(1.0));
  EXPECT_NEAR(part.disk_bytes_per_token, 100.0 * kMiB, 1e-3);
  EXPECT_NEAR(part.decode.disk, 100.0 * kMiB / 1e9, 1e-12);
  EXPECT_EQ(part.weight_bytes, 300 * kMiB + s.ring_bytes + 256 * kMiB);
}

TEST(Plan, HitRateIsCappedAtOne) {
  PlanOptions o;
  o.hit_rate = 0.5;
  // Not every expert has a slot: the override applies.
  EXPECT_EQ(plan_budget(layout(true, 16), model(), machine(), o).hit_rate, 0.5);
  // Every expert has one: 1, whatever is asked.
  EXPECT_EQ(plan_budget(layout(true, 256), model(), machine(), o).hit_rate, 1.0);
  o.hit_rate = 1.0;
  const BudgetPlan all = plan_budget(layout(true, 16), model(), machine(), o);
  EXPECT_EQ(all.hit_rate, 1.0);
  EXPECT_EQ(all.decode.disk, 0.0);
  o.hit_rate = 1.5;
  EXPECT_NE(testing::error_of([&] { plan_budget(layout(true, 16), model(), machine(), o); }).find("hit rate"),
            std::string::npos);
}

TEST(Plan, BelowTheMinimumIsReportedNotPlanned) {
  WeightStoreStats s = layout(false, 0, 10 * kMiB);
  s.ring_bytes = 0;
  const BudgetPlan p = plan_budget(s, model(), machine());
  EXPECT_FALSE(p.feasible);
  EXPECT_EQ(p.layout.minimum_budget, 76 * kMiB);
  EXPECT_EQ(p.decode_tokens_per_second, 0.0);
  EXPECT_GT(p.overhead_bytes, 0u);  // the overhead is known whatever the budget
  s.budget = s.minimum_budget;
  EXPECT_TRUE(plan_budget(s, model(), machine()).feasible);
}

TEST(Plan, PeakRssIsTheBudgetInUsePlusTheStatedOverhead) {
  PlanOptions o;
  o.prompt_tokens = 300;
  o.chunk_tokens = 256;
  const ModelFigures m = model();
  const BudgetPlan streamed = plan_budget(layout(false, 40), m, machine(), o);
  EXPECT_EQ(streamed.weight_bytes, 120 * kMiB + 40 * kMiB);
  EXPECT_EQ(streamed.metadata_bytes, 1000u * 650u);
  EXPECT_EQ(streamed.state_bytes, 10 * kMiB + 300u * 1024u);
  EXPECT_EQ(streamed.activation_bytes, 256u * 4096u);
  EXPECT_EQ(streamed.process_bytes, 64 * kMiB);
  EXPECT_EQ(streamed.peak_rss_bytes, streamed.weight_bytes + streamed.metadata_bytes + streamed.state_bytes +
                                         streamed.activation_bytes + streamed.process_bytes);
  const BudgetPlan resident = plan_budget(layout(true, 40), m, machine(), o);
  EXPECT_EQ(resident.weight_bytes, 400 * kMiB + 40 * kMiB);
  MachineFigures small = machine();
  small.ram_bytes = 300 * kMiB;
  EXPECT_FALSE(plan_budget(layout(false, 40), m, small, o).exceeds_ram);
  EXPECT_TRUE(plan_budget(layout(true, 40), m, small, o).exceeds_ram);
}

TEST(Plan, PrefillOfOneTokenChunksIsDecode) {
  // A chunk of one token touches exactly top_k experts per layer: the decode step.
  PlanOptions o;
  o.prompt_tokens = 7;
  o.chunk_tokens = 1;
  for (bool resident : {true, false}) {
    const BudgetPlan p = plan_budget(layout(resident, 16), model(), machine(), o);
    EXPECT_NEAR(p.prefill_seconds, 7 * p.decode_seconds, 1e-9 * p.prefill_seconds) << resident;
    EXPECT_NEAR(p.prefill_tokens_per_second, p.decode_tokens_per_second, 1e-6 * p.decode_tokens_per_second);
  }
}

TEST(Plan, PrefillChunksShareTheirReads) {
  // A 256-token chunk touches E (1 - (1 - k/E)^256) of the 64 experts per layer (all but ~0)
  // and reads the trunk once: far fewer bytes per token than decode.
  PlanOptions o;
  o.prompt_tokens = 512;
  o.chunk_tokens = 256;
  MachineFigures hw = machine(1.0, 20, 1e6);
  const BudgetPlan p = plan_budget(layout(false, 16), model(), hw, o);
  const double touched = 4 * 64 * (1 - std::pow(1 - 8.0 / 64, 256));
  const double miss = 1 - 16.0 / 256;
  const double per_chunk_disk = 400.0 * kMiB / 1e9 + touched * miss * kMiB / 1e9;
  EXPECT_NEAR(p.prefill.disk, 2 * per_chunk_disk, 1e-9);
  EXPECT_GT(p.prefill_tokens_per_second, 50 * p.decode_tokens_per_second);
  // Compute-bound when the FLOP rate is low: 2 x active params x tokens at 0.6 of the peak.
  hw = machine(1e6, 1e6, 100);
  const BudgetPlan slow = plan_budget(layout(true, 256), model(), hw, o);
  const double flops = 2.0 * static_cast<double>(model().active_params()) * 512;
  EXPECT_NEAR(slow.prefill_seconds, flops / (100e9 * 0.6), 1e-3 * slow.prefill_seconds);
  EXPECT_GT(slow.prefill.compute, 0.99 * slow.prefill_seconds);
}

TEST(Plan, RefusesMachineFiguresThatAreNotPositive) {
  MachineFigures hw = machine();
  hw.disk_gbps = 0;
  EXPECT_NE(testing::error_of([&] { plan_budget(layout(true, 16), model(), hw); }).find("disk bandwidth"),
            std::string::npos);
  hw = machine();
  hw.mxfp4_gemv_eff = 1.5;
  EXPECT_NE(testing::error_of([&] { plan_budget(layout(true, 16), model(), hw); }).find("MXFP4 GEMV efficiency"),
            std::string::npos);
}

// The budget keywords and model figures against a real checkpoint and the weight store's own
// placement.
TEST(Plan, KeywordBudgetsMatchTheWeightStorePlacement) {
  ModelOptions opts;
  opts.headers_only = true;
  auto m = Model::load(testing::fixture_dir("k3-tiny-a"), opts);
  const TextConfig& c = m->text();
  const ModelFigures f = model_figures(m->config(), m->weights(), m->checkpoint());
  int moe_layers = 0;
  for (int l = 0; l < c.num_layers; ++l) moe_layers += c.is_moe_layer(l) ? 1 : 0;
  EXPECT_EQ(f.moe_layers, moe_layers);
  EXPECT_EQ(f.top_k, c.top_k);
  EXPECT_EQ(f.experts_per_layer, c.num_experts);
  const Matrix& embed = m->weights().embed;
  EXPECT_EQ(f.trunk_params + static_cast<uint64_t>(moe_layers) * c.num_experts * f.expert_params +
                static_cast<uint64_t>(embed.rows) * embed.cols,
            m->weights().total_params);
  EXPECT_EQ(f.tensor_count, m->checkpoint().tensors().size());

  auto at = [&](uint64_t budget) { return WeightStore::layout(m->checkpoint(), m->weights(), c, budget); };
  const WeightStoreStats sizes = at(0);
  const WeightStoreStats trunk = at(trunk_resident_budget(sizes));
  EXPECT_TRUE(trunk.trunk_resident);
  EXPECT_LT(trunk.expert_slots, trunk.expert_count);
  EXPECT_FALSE(at(trunk_resident_budget(sizes) - 1).trunk_resident);
  const WeightStoreStats all = at(everything_budget(sizes));
  EXPECT_TRUE(all.trunk_resident);
  EXPECT_EQ(all.expert_slots, all.expert_count);
  EXPECT_LT(at(everything_budget(sizes) - 1).expert_slots, all.expert_count);
  EXPECT_EQ(plan_budget(all, f, machine()).hit_rate, 1.0);
}

}  // namespace
}  // namespace k3
