// `k3 plan` as a user runs it, with every machine figure given (nothing is measured): one row per
// budget with its placement, the keyword budgets, a budget below the minimum, the JSON report and
// the c-engine preset's published column.
#include <gtest/gtest.h>

#include <sstream>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace k3 {
namespace {

using testing::run_k3;

std::string tiny() { return testing::fixture_dir("k3-tiny-a"); }

// The table rows: lines after the header line that starts with "budget".
std::vector<std::string> rows(const std::string& out) {
  std::vector<std::string> r;
  std::istringstream in(out);
  std::string line;
  bool table = false;
  while (std::getline(in, line)) {
    if (line.rfind("budget ", 0) == 0) table = true;
    else if (table && line.empty()) break;
    else if (table) r.push_back(line);
  }
  return r;
}

TEST(PlanCli, OneRowPerBudget) {
  testing::TempDir tmp;
  const auto r = run_k3("plan --model " + tiny() + " --budget 1K,64M,trunk,all --disk-gbps 2 --mem-gbps 20 "
                        "--gflops 100 --json " + tmp.file("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("disk 2.00 GB/s (given)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("memory 20.0 GB/s (given)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("peak RSS     weights in use + "), std::string::npos) << r.out;
  for (const char* col : {"placement", "hit", "decode t/s", "s/token", "disk", "mem", "cpu", "prefill t/s", "peak RSS"})
    EXPECT_NE(r.out.find(col), std::string::npos) << col;
  const auto t = rows(r.out);
  ASSERT_EQ(t.size(), 4u) << r.out;
  EXPECT_EQ(t[0].rfind("1K", 0), 0u);
  EXPECT_NE(t[0].find("below the minimum: the store needs at least"), std::string::npos) << t[0];
  EXPECT_EQ(t[1].rfind("64M", 0), 0u);
  EXPECT_EQ(t[2].rfind("trunk (", 0), 0u);
  EXPECT_NE(t[2].find("trunk resident"), std::string::npos) << t[2];
  EXPECT_EQ(t[3].rfind("all (", 0), 0u);
  EXPECT_NE(t[3].find("100%"), std::string::npos) << t[3];  // every expert cached

  const nlohmann::json j = nlohmann::json::parse(testing::read_file(tmp.file("plan.json")));
  ASSERT_EQ(j["budgets"].size(), 4u);
  EXPECT_FALSE(j["budgets"][0]["feasible"].get<bool>());
  EXPECT_EQ(j["machine"]["disk_gbps"].get<double>(), 2.0);
  for (int i = 1; i < 4; ++i) {
    const auto& b = j["budgets"][i];
    EXPECT_TRUE(b["feasible"].get<bool>());
    EXPECT_GT(b["decode_tokens_per_second"].get<double>(), 0.0);
    EXPECT_NEAR(b["decode_tokens_per_second"].get<double>() * b["decode_seconds"].get<double>(), 1.0, 1e-9);
    const auto& s = b["decode_split_seconds"];
    EXPECT_NEAR(s["disk"].get<double>() + s["memory"].get<double>() + s["compute"].get<double>(),
                b["decode_seconds"].get<double>(), 1e-9);
  }
  EXPECT_EQ(j["budgets"][3]["hit_rate"].get<double>(), 1.0);
  EXPECT_TRUE(j["budgets"][2]["trunk_resident"].get<bool>());
  // More memory is never slower: trunk < all <= 64M (the tiny checkpoint is a few MB).
  EXPECT_GT(j["budgets"][2]["decode_seconds"].get<double>(), j["budgets"][3]["decode_seconds"].get<double>());
  EXPECT_EQ(j["budgets"][1]["decode_seconds"].get<double>(), j["budgets"][3]["decode_seconds"].get<double>());
}

TEST(PlanCli, CEnginePresetPrintsThePublishedFigures) {
  const auto r = run_k3("plan --model " + tiny() + " --preset-machine c-engine");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("124 cores"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("disk 4.60 GB/s (published)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("assumed"), std::string::npos) << r.out;
  const auto t = rows(r.out);
  ASSERT_EQ(t.size(), 4u) << r.out;
  EXPECT_NE(t[0].find("26.5"), std::string::npos) << t[0];
  EXPECT_NE(t[1].find("24.2"), std::string::npos) << t[1];
  EXPECT_NE(t[2].find("19.8"), std::string::npos) << t[2];
  EXPECT_NE(t[3].find("5.59"), std::string::npos) << t[3];
}

TEST(PlanCli, NamesBadInput) {
  const std::string base = "plan --model " + tiny() + " --disk-gbps 2 --mem-gbps 20 --gflops 100 ";
  auto r = run_k3(base + "--budget 8G,,trunk");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--budget: an empty entry"), std::string::npos) << r.err;
  r = run_k3(base + "--budget lots");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("lots"), std::string::npos) << r.err;
  r = run_k3(base + "--preset-machine cray");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--preset-machine: unknown machine 'cray'"), std::string::npos) << r.err;
  r = run_k3(base + "--hit-rate 2");
  EXPECT_NE(r.exit_code, 0);
}

}  // namespace
}  // namespace k3
