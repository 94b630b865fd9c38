// The throughput layout's expert placement and per-step plan (dist/expert_plan.h), against
// what they promise: every pair on a holder of its expert, none lost, the same plan from the
// same routing, and each rank's pair count within one of the mean when every rank holds a copy.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "dist/expert_plan.h"
#include "support/test_support.h"

namespace k3::dist {
namespace {

std::vector<int32_t> random_routing(std::mt19937& rng, int experts, int64_t tokens, int top_k, double skew) {
  // top_k distinct experts per token; skew > 0 favours low expert ids (a popular few).
  std::vector<int32_t> sel;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> mine;
    while (static_cast<int>(mine.size()) < std::min(top_k, experts)) {
      const int e = static_cast<int>(std::pow(u(rng), 1.0 + skew) * experts) % experts;
      if (std::find(mine.begin(), mine.end(), e) == mine.end()) mine.push_back(e);
    }
    sel.insert(sel.end(), mine.begin(), mine.end());
  }
  return sel;
}

TEST(ExpertPlacement, HomeAndReplicasWrapAroundTheRanks) {
  const ExpertPlacement p(10, 4, 1);
  EXPECT_TRUE(p.parallel());
  EXPECT_EQ(p.home(6), 2);
  EXPECT_TRUE(p.holds(2, 6));
  EXPECT_TRUE(p.holds(3, 6));
  EXPECT_FALSE(p.holds(0, 6));
  EXPECT_TRUE(p.holds(0, 7));  // home 3, replica on 0
  EXPECT_EQ(p.holder(7, 1), 0);
  // 10 experts over 4 ranks: homes 3, 3, 2, 2, each rank also a copy of the previous rank's.
  EXPECT_EQ(p.experts_held(0), 3 + 2);
  EXPECT_EQ(p.experts_held(1), 3 + 3);
  EXPECT_EQ(p.experts_held(2), 2 + 3);
  EXPECT_EQ(p.experts_held(3), 2 + 2);
  EXPECT_FALSE(ExpertPlacement().parallel());
}

TEST(ExpertPlacement, ReplicasBeyondTheOtherRanksAreAnError) {
  const std::string err = testing::error_of([] { ExpertPlacement(8, 3, 3); });
  EXPECT_NE(err.find("--expert-replicas: 3 extra copies"), std::string::npos) << err;
  EXPECT_NE(err.find("between 0 and 2"), std::string::npos) << err;
  EXPECT_NE(testing::error_of([] { ExpertPlacement(8, 3, -1); }).find("--expert-replicas"), std::string::npos);
}

TEST(ExpertPlan, EveryPairRunsOnAHolderAndNoneIsLost) {
  std::mt19937 rng(7);
  for (int ranks : {1, 2, 3, 4, 5, 7}) {
    for (int replicas = 0; replicas < ranks; ++replicas) {
      for (int experts : {3, 8, 13, 64}) {
        for (int64_t tokens : {int64_t{1}, int64_t{5}, int64_t{64}}) {
          const std::vector<int32_t> sel = random_routing(rng, experts, tokens, 4, 1.5);
          const ExpertPlacement p(experts, ranks, replicas);
          for (bool balance : {false, true}) {
            const PairPlan plan = plan_pairs(p, sel, balance);
            SCOPED_TRACE(::testing::Message() << ranks << " ranks, " << replicas << " replicas, " << experts
                                              << " experts, " << tokens << " tokens, balance " << balance);
            std::vector<int64_t> count(experts, 0), load(ranks, 0);
            for (int32_t e : sel) ++count[e];
            for (int e = 0; e < experts; ++e) {
              ASSERT_EQ(plan.run[e].size(), static_cast<size_t>(replicas + 1));
              EXPECT_EQ(std::accumulate(plan.run[e].begin(), plan.run[e].end(), int64_t{0}), count[e]);
              for (int j = 0; j <= replicas; ++j) {
                EXPECT_GE(plan.run[e][j], 0);
                EXPECT_TRUE(p.holds(p.holder(e, j), e));
                load[p.holder(e, j)] += plan.run[e][j];
              }
              if (!balance) {
                EXPECT_EQ(plan.run[e][0], count[e]);
              }
            }
            EXPECT_EQ(load, plan.load);
            EXPECT_EQ(plan.pairs, static_cast<int64_t>(sel.size()));
            // The same routing always gives the same plan (every rank computes it alone).
            EXPECT_EQ(plan_pairs(p, sel, balance).run, plan.run);
          }
        }
      }
    }
  }
}

TEST(ExpertPlan, ACopyOnEveryRankBalancesToWithinOneOfTheMean) {
  std::mt19937 rng(11);
  for (int ranks : {2, 3, 4, 6}) {
    for (int experts : {8, 13, 96}) {
      for (int64_t tokens : {int64_t{1}, int64_t{3}, int64_t{16}, int64_t{200}}) {
        const std::vector<int32_t> sel = random_routing(rng, experts, tokens, 6, 2.0);
        const PairPlan plan = plan_pairs(ExpertPlacement(experts, ranks, ranks - 1), sel);
        const auto [lo, hi] = std::minmax_element(plan.load.begin(), plan.load.end());
        EXPECT_LE(*hi - *lo, 1) << ranks << " ranks, " << experts << " experts, " << tokens << " tokens";
      }
    }
  }
}

TEST(ExpertPlan, ReplicasNeverMakeTheBusiestRankBusier) {
  std::mt19937 rng(5);
  for (int ranks : {3, 4, 8}) {
    for (int replicas = 1; replicas < ranks; ++replicas) {
      for (int trial = 0; trial < 20; ++trial) {
        const std::vector<int32_t> sel = random_routing(rng, 32, 16, 4, 3.0);
        const ExpertPlacement p(32, ranks, replicas);
        const PairPlan home = plan_pairs(p, sel, false), planned = plan_pairs(p, sel, true);
        EXPECT_LE(planned.imbalance(), home.imbalance());
        // No single pair can move from the busiest rank to a holder two or more below it.
        const int64_t most = *std::max_element(planned.load.begin(), planned.load.end());
        for (int e = 0; e < 32; ++e)
          for (int j = 0; j <= replicas; ++j) {
            if (planned.run[e][j] == 0 || planned.load[p.holder(e, j)] != most) continue;
            for (int i = 0; i <= replicas; ++i) EXPECT_GT(planned.load[p.holder(e, i)] + 2, most);
          }
      }
    }
  }
}

TEST(ExpertPlan, ImbalanceIsTheBusiestRankOverTheMean) {
  const ExpertPlacement p(4, 2, 0);
  const std::vector<int32_t> sel = {0, 2, 0, 1};  // homes 0, 0, 0, 1
  const PairPlan plan = plan_pairs(p, sel);
  EXPECT_EQ(plan.load, (std::vector<int64_t>{3, 1}));
  EXPECT_DOUBLE_EQ(plan.imbalance(), 1.5);
  EXPECT_DOUBLE_EQ(plan_pairs(p, {}).imbalance(), 1.0);
}

TEST(Layout, NamesParseAndOthersAreAnError) {
  EXPECT_EQ(parse_layout("latency"), Layout::kLatency);
  EXPECT_EQ(parse_layout("throughput"), Layout::kThroughput);
  EXPECT_STREQ(layout_name(Layout::kThroughput), "throughput");
  EXPECT_NE(testing::error_of([] { parse_layout("experts"); }).find("--layout: expected latency or throughput"),
            std::string::npos);
}

}  // namespace
}  // namespace k3::dist
