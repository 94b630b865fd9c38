// The trained demo model (models/k3-demo) against its trainer: train/golden.py ran the PyTorch K3
// of train/k3model.py -- an implementation independent of k3's, checked against the k3-tiny-a
// goldens -- on the exported checkpoint and kept, per prompt, the 64-token greedy continuation,
// the logits of the last prompt row and of every 8th greedy step, and each step's top-2 gap.
// Unlike random weights, trained weights give peaked, meaningful distributions, so this checks
// k3 where a user sees it: greedy text.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/cpu_features.h"
#include "base/error.h"
#include "engine/generator.h"
#include "engine/sampler.h"
#include "io/safetensors.h"
#include "model/k3_model.h"
#include "support/test_support.h"

namespace k3 {
namespace {

constexpr double kDemoLogitsMaxRel = 5e-4;  // the fixture tolerance (tests/data/fixtures/k3-tiny-a)
constexpr int kDemoPrompts = 5;

class DemoModelTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (GetParam() > best_isa()) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam());
    saved_ = active_isa();
    force_isa(GetParam());
    model_ = Model::load(testing::demo_model_dir());
  }
  void TearDown() override { force_isa(saved_); }

  Isa saved_ = Isa::kRef;
  std::unique_ptr<Model> model_;
  SafetensorsFile golden_{testing::test_data_path("k3-demo/golden.safetensors")};
};

TEST_P(DemoModelTest, LogitsAndGreedyTextMatchTheTrainer) {
  const int64_t V = model_->text().vocab_size;
  for (int p = 0; p < kDemoPrompts; ++p) {
    SCOPED_TRACE(::testing::Message() << "prompt " << p);
    const std::vector<int32_t> prompt = testing::read_i32(golden_, cat("p", p, ".prompt_ids"));
    const std::vector<int32_t> gen = testing::read_i32(golden_, cat("p", p, ".gen_tokens"));
    const std::vector<int32_t> rows = testing::read_i32(golden_, cat("p", p, ".rows"));
    const std::vector<float> want = testing::read_f32(golden_, cat("p", p, ".logits"));
    const std::vector<float> gap = testing::read_f32(golden_, cat("p", p, ".gen_top2_gap"));
    ASSERT_EQ(want.size(), rows.size() * V);

    // Row k holds the logits that chose gen[k]: the prefill's last row, then decode steps fed
    // with the trainer's tokens.
    SequenceState s = model_->new_sequence();
    std::vector<float> logits = prefill_logits(*model_, s, prompt, /*chunk=*/256);
    std::vector<float> row(logits.end() - V, logits.end());
    double max_ref = 0;
    for (float x : want) max_ref = std::max(max_ref, static_cast<double>(std::fabs(x)));
    const double near_tie = 2 * kDemoLogitsMaxRel * max_ref;  // below this gap the argmax is not meaningful
    double max_abs = 0;
    size_t next = 0;
    for (int k = 0; k < static_cast<int>(gen.size()); ++k) {
      if (k > 0) {
        SequenceInput in{&s, std::span<const int32_t>(&gen[k - 1], 1), false};
        row.clear();  // forward appends the step's logits
        model_->forward(std::span<const SequenceInput>(&in, 1), &row);
        ASSERT_EQ(static_cast<int64_t>(row.size()), V);
      }
      if (next < rows.size() && rows[next] == k) {
        for (int64_t v = 0; v < V; ++v)
          max_abs = std::max(max_abs, std::fabs(static_cast<double>(row[v]) - want[next * V + v]));
        ++next;
      }
      if (gap[k] > near_tie) {
        EXPECT_EQ(argmax(row.data(), V), gen[k]) << "greedy step " << k;
      }
    }
    ASSERT_EQ(next, rows.size());
    std::printf("[measured] %s prompt %d: logits max_abs %.3g rel %.3g (%zu rows), min greedy gap %.3g\n",
                isa_name(GetParam()), p, max_abs, max_abs / max_ref, rows.size(),
                *std::min_element(gap.begin(), gap.end()));
    EXPECT_LE(max_abs / max_ref, kDemoLogitsMaxRel);

    // k3's own greedy generation, with its caches, writes the trainer's 64 tokens.
    SequenceState g = model_->new_sequence();
    GenerateOptions opt;
    opt.max_tokens = static_cast<int>(gen.size());
    EXPECT_EQ(generate(*model_, g, prompt, opt), gen);
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, DemoModelTest, ::testing::Values(Isa::kRef, Isa::kAvx2, Isa::kAvx512, Isa::kAmx),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace
}  // namespace k3
