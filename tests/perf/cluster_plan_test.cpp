// The cluster model of k3 plan --ranks (perf/cluster_plan.h) on hand-made figures: each term of
// the decode time, when the network counts, and the errors for missing figures.
#include <gtest/gtest.h>

#include "perf/cluster_plan.h"
#include "support/test_support.h"

namespace k3 {
namespace {

RankFootprint cluster_footprint() {
  RankFootprint f;
  f.trunk_read_per_token = 900'000'000;
  f.expert_read_per_token = 100'000'000;
  f.read_per_token = 1'000'000'000;
  f.received_per_token = 10'000'000;
  f.sent_per_token = 5'000'000;
  f.collectives_per_token = 100;
  return f;
}

ModelFigures cluster_model() {
  ModelFigures m;
  m.top_k = 8;
  m.moe_layers = 4;
  m.experts_per_layer = 64;
  m.trunk_params = 400'000'000;
  m.expert_params = 1'000'000;
  m.sequence_state_bytes = 50'000'000;
  return m;
}

MachineFigures rank_machine() {
  MachineFigures hw;
  hw.mem_gbps = 100;
  hw.fp32_gflops = 1000;
  return hw;  // bf16 GEMV at 0.9, MXFP4 at 0.5 of the bandwidth
}

TEST(ClusterPlan, DecodeIsWeightsStateAndExchanges) {
  ClusterFigures cl;
  cl.ranks = 4;
  cl.ranks_per_node = 2;
  cl.net_gbps = 10;
  cl.net_latency_us = 2;
  const ClusterPlan p = plan_cluster(cluster_footprint(), cluster_model(), rank_machine(), cl);
  EXPECT_EQ(p.nodes, 2);
  EXPECT_NEAR(p.weights_s, 900e6 / (100e9 * 0.9) + 100e6 / (100e9 * 0.5), 1e-12);
  EXPECT_NEAR(p.state_s, 2 * 50e6 / 100e9, 1e-12);
  EXPECT_NEAR(p.exchange_latency_s, 100 * 2 * 2e-6, 1e-12);        // 100 exchanges x log2(4) rounds x 2 us
  EXPECT_NEAR(p.exchange_bytes_s, 10e6 * 2 * (2.0 / 3) / 10e9, 1e-12);  // a node's 2 ranks, 2 of 3 peers remote
  EXPECT_NEAR(p.decode_seconds, p.weights_s + p.state_s + p.exchange_latency_s + p.exchange_bytes_s, 1e-15);
  EXPECT_NEAR(p.decode_tokens_per_second, 1 / p.decode_seconds, 1e-9);
  EXPECT_GT(p.prefill_tokens_per_second, p.decode_tokens_per_second);
}

TEST(ClusterPlan, OneNodeUsesSharedMemoryAndNoNetwork) {
  ClusterFigures cl;
  cl.ranks = 2;
  cl.ranks_per_node = 2;
  cl.shm_latency_us = 0.5;
  const ClusterPlan p = plan_cluster(cluster_footprint(), cluster_model(), rank_machine(), cl);
  EXPECT_EQ(p.nodes, 1);
  EXPECT_NEAR(p.exchange_latency_s, 100 * 1 * 0.5e-6, 1e-12);
  EXPECT_EQ(p.exchange_bytes_s, 0);
  cl.ranks = 1;
  const ClusterPlan one = plan_cluster(cluster_footprint(), cluster_model(), rank_machine(), cl);
  EXPECT_EQ(one.exchange_latency_s, 0);
}

TEST(ClusterPlan, ANetworkIsNeededAcrossNodes) {
  ClusterFigures cl;
  cl.ranks = 4;
  const std::string err = testing::error_of([&] { plan_cluster(cluster_footprint(), cluster_model(), rank_machine(), cl); });
  EXPECT_NE(err.find("need the network's bandwidth and latency"), std::string::npos) << err;
}

TEST(ClusterPlan, CliPrintsARowPerRankCount) {
  const auto r = testing::run_k3("plan --model " + testing::fixture_dir("k3-tiny-a") +
                                 " --ranks 1,3 --ranks-per-node 4 --mem-gbps 20 --gflops 100");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\n     1      1 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n     3      1 "), std::string::npos) << r.out;
  const auto bad = testing::run_k3("plan --model " + testing::fixture_dir("k3-tiny-a") + " --ranks 2,x --mem-gbps 20 --gflops 100");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--ranks: 'x' is not a rank count"), std::string::npos) << bad.err;
  const auto net = testing::run_k3("plan --model " + testing::fixture_dir("k3-tiny-a") + " --ranks 4 --mem-gbps 20 --gflops 100");
  EXPECT_NE(net.err.find("--net-gbps"), std::string::npos) << net.err;
}

}  // namespace
}  // namespace k3
