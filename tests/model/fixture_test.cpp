// The full model against the k3-tiny-a golden data (an independent fp32 reference validated on
// the real weights): prefill logits, the 24-token greedy continuation generated incrementally,
// every decode step's logits, and the debug intermediates -- on every kernel dispatch path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/cpu_features.h"
#include "base/error.h"
#include "engine/generator.h"
#include "engine/sampler.h"
#include "model/k3_model.h"
#include "support/test_support.h"

namespace k3 {
namespace {

constexpr double kLogitsMaxRel = 5e-4;  // fixture README, "Recommended tolerances"
constexpr double kDebugMaxRel = 1e-4;

struct Golden {
  SafetensorsFile file{testing::fixture_dir("k3-tiny-a") + "/golden.safetensors"};
  std::vector<int32_t> prompt(int p) { return testing::read_i32(file, cat("p", p, ".prompt_ids")); }
  std::vector<float> f32(const std::string& n) { return testing::read_f32(file, n); }
  std::vector<int32_t> i32(const std::string& n) { return testing::read_i32(file, n); }
};

struct Diff {
  double max_abs = 0, max_ref = 0;
  void add(const float* a, const float* ref, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(a[i]) - ref[i]));
      max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
    }
  }
  double rel() const { return max_abs / max_ref; }
};

class FixtureTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (GetParam() > best_isa()) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam());
    saved_ = active_isa();
    force_isa(GetParam());
    model_ = Model::load(testing::fixture_dir("k3-tiny-a"));
  }
  void TearDown() override { force_isa(saved_); }

  Isa saved_ = Isa::kRef;
  std::unique_ptr<Model> model_;
  Golden golden_;
};

TEST_P(FixtureTest, PrefillDecodeAndGreedyMatchGolden) {
  const int64_t V = model_->text().vocab_size;
  for (int p = 0; p < 2; ++p) {
    SCOPED_TRACE(::testing::Message() << "prompt " << p);
    const std::vector<int32_t> prompt = golden_.prompt(p);
    const std::vector<float> want_prefill = golden_.f32(cat("p", p, ".prefill_logits"));
    const std::vector<float> want_decode = golden_.f32(cat("p", p, ".decode_logits"));
    const std::vector<float> gap = golden_.f32(cat("p", p, ".prefill_top2_gap"));
    const std::vector<int32_t> gen = golden_.i32(cat("p", p, ".gen_tokens"));
    const int64_t T = static_cast<int64_t>(prompt.size());

    // One prefill of the whole prompt, then decode steps teacher-forced with the golden tokens.
    SequenceState s = model_->new_sequence();
    std::vector<float> logits = prefill_logits(*model_, s, prompt, /*chunk=*/T);
    ASSERT_EQ(logits.size(), want_prefill.size());
    Diff prefill, all;
    prefill.add(logits.data(), want_prefill.data(), logits.size());
    all.add(logits.data(), want_prefill.data(), logits.size());
    double max_ref = 0;
    for (float x : want_prefill) max_ref = std::max(max_ref, static_cast<double>(std::fabs(x)));
    for (int64_t t = 0; t < T; ++t) {
      if (gap[t] <= 2 * kLogitsMaxRel * max_ref) continue;  // near-tie: argmax not meaningful
      EXPECT_EQ(argmax(&logits[t * V], V), argmax(&want_prefill[t * V], V)) << "prefill position " << t;
    }
    for (size_t k = 0; k < gen.size(); ++k) {
      std::vector<float> step;
      SequenceInput in{&s, std::span<const int32_t>(&gen[k], 1), false};
      model_->forward(std::span<const SequenceInput>(&in, 1), &step);
      all.add(step.data(), &want_decode[k * V], V);
    }
    std::printf("[measured] %s prompt %d: prefill max_abs %.3g rel %.3g; prefill+decode max_abs %.3g rel %.3g\n",
                isa_name(GetParam()), p, prefill.max_abs, prefill.rel(), all.max_abs, all.rel());
    EXPECT_LE(all.rel(), kLogitsMaxRel);

    // Greedy generation with caches must reproduce all 24 tokens.
    SequenceState g = model_->new_sequence();
    GenerateOptions opt;
    opt.max_tokens = static_cast<int>(gen.size());
    std::vector<int32_t> got = generate(*model_, g, prompt, opt);
    EXPECT_EQ(got, gen);
  }
}

TEST_P(FixtureTest, DebugIntermediatesMatch) {
  const std::vector<int32_t> prompt = golden_.prompt(0);
  SequenceState s = model_->new_sequence();
  SequenceInput in{&s, std::span<const int32_t>(prompt.data(), 7), true};
  std::vector<float> logits;
  ForwardTrace trace;
  model_->forward(std::span<const SequenceInput>(&in, 1), &logits, &trace);
  const int L = model_->text().num_layers, d = model_->text().hidden_size, K = model_->text().top_k;
  const std::vector<float> attn = golden_.f32("dbg.attn_out"), ffn = golden_.f32("dbg.ffn_out");
  const std::vector<float> fin = golden_.f32("dbg.final_hidden");
  const std::vector<int32_t> routes = golden_.i32("dbg.routes");
  for (int l = 0; l < L; ++l) {
    SCOPED_TRACE(::testing::Message() << "layer " << l);
    Diff a, f;
    a.add(trace.attn_out[l].data(), &attn[static_cast<size_t>(l) * 7 * d], 7 * d);
    f.add(trace.ffn_out[l].data(), &ffn[static_cast<size_t>(l) * 7 * d], 7 * d);
    EXPECT_LE(a.rel(), kDebugMaxRel);
    EXPECT_LE(f.rel(), kDebugMaxRel);
    for (int t = 0; t < 7; ++t) {
      std::vector<int32_t> want(&routes[(static_cast<size_t>(l) * 7 + t) * K], &routes[(static_cast<size_t>(l) * 7 + t) * K] + K);
      if (want[0] == -1) {
        EXPECT_TRUE(trace.routes[l].empty());
        continue;
      }
      std::vector<int32_t> got(&trace.routes[l][t * K], &trace.routes[l][t * K] + K);
      std::sort(got.begin(), got.end());
      EXPECT_EQ(got, want) << "position " << t;
    }
  }
  Diff h;
  h.add(trace.final_hidden.data(), fin.data(), fin.size());
  EXPECT_LE(h.rel(), kDebugMaxRel);
}

INSTANTIATE_TEST_SUITE_P(Isas, FixtureTest, ::testing::Values(Isa::kRef, Isa::kAvx2, Isa::kAvx512, Isa::kAmx),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace
}  // namespace k3
