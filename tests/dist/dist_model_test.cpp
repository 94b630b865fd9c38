// The whole model over the ranks of an MPI job (the dist_test_np* tests run this under
// `mpirun -np R`; alone it is one rank): prefill logits, teacher-forced decode steps and greedy
// tokens on the k3-tiny-a golden data, on every instruction set.  Each must be bit-identical to
// the same process computing every product whole, and within the fixture's tolerance of the
// golden logits, so the result cannot depend on R.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "dist/world.h"
#include "engine/generator.h"
#include "kernels/linear.h"
#include "model/k3_model.h"
#include "model/partition.h"
#include "support/test_support.h"

namespace k3 {
namespace {

constexpr double kLogitsMaxRel = 5e-4;  // fixture README, "Recommended tolerances"

struct Outputs {
  std::vector<float> prefill, decode;
  std::vector<int32_t> greedy;
};

// Prefill in chunks of 3 (so several forward passes), decode teacher-forced with `forced`, and a
// greedy continuation of `greedy_tokens`.
Outputs run_fixture(Model& model, const std::vector<int32_t>& prompt, const std::vector<int32_t>& forced,
        int greedy_tokens) {
  Outputs r;
  SequenceState s = model.new_sequence();
  r.prefill = prefill_logits(model, s, prompt, /*chunk=*/3);
  for (int32_t t : forced) {
    std::vector<float> step;
    SequenceInput in{&s, std::span<const int32_t>(&t, 1), false};
    model.forward(std::span<const SequenceInput>(&in, 1), &step);
    r.decode.insert(r.decode.end(), step.begin(), step.end());
  }
  SequenceState g = model.new_sequence();
  GenerateOptions opt;
  opt.max_tokens = greedy_tokens;
  r.greedy = generate(model, g, prompt, opt);
  return r;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double rel(const std::vector<float>& a, const std::vector<float>& ref) {
  double d = 0, m = 0;
  for (size_t i = 0; i < a.size() && i < ref.size(); ++i) {
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - ref[i]));
    m = std::max(m, std::fabs(static_cast<double>(ref[i])));
  }
  return d / m;
}

TEST(DistModel, FixtureLogitsAreBitIdenticalToOneProcessOnEveryIsa) {
  SafetensorsFile golden(testing::fixture_dir("k3-tiny-a") + "/golden.safetensors");
  const std::vector<int32_t> prompt = testing::read_i32(golden, "p0.prompt_ids");
  const std::vector<int32_t> gen = testing::read_i32(golden, "p0.gen_tokens");
  const std::vector<float> want_prefill = testing::read_f32(golden, "p0.prefill_logits");
  const std::vector<float> want_decode = testing::read_f32(golden, "p0.decode_logits");
  const std::vector<int32_t> forced(gen.begin(), gen.begin() + 6);
  testing::for_each_isa([&](Isa) {
    SCOPED_TRACE(::testing::Message() << "rank " << dist::rank() << " of " << dist::size());
    // Over several ranks each holds only its own rows (model/partition.h); the same checkpoint
    // mapped whole, every product computed whole by this process, is the reference.
    auto model = Model::load(testing::fixture_dir("k3-tiny-a"));
    ModelOptions mapped;
    mapped.residency = Residency::kMapped;
    auto whole_model = Model::load(testing::fixture_dir("k3-tiny-a"), mapped);
    const Outputs split = run_fixture(*model, prompt, forced, 8);
    Outputs whole;
    {
      SerialScope alone;
      whole = run_fixture(*whole_model, prompt, forced, 8);
    }
    EXPECT_TRUE(bits_equal(split.prefill, whole.prefill));
    EXPECT_TRUE(bits_equal(split.decode, whole.decode));
    EXPECT_EQ(split.greedy, whole.greedy);
    EXPECT_EQ(split.greedy, std::vector<int32_t>(gen.begin(), gen.begin() + 8));
    EXPECT_LE(rel(split.prefill, want_prefill), kLogitsMaxRel);
    EXPECT_LE(rel(split.decode, std::vector<float>(want_decode.begin(), want_decode.begin() + split.decode.size())),
              kLogitsMaxRel);
  });
}

// The throughput layout (experts whole on their ranks, each step's pairs planned over the
// copies, outputs all-gathered and summed in expert order) computes the same bits as one
// process: a prompt in chunks, teacher-forced decode, greedy tokens, and a step that batches
// several sequences, for every replica count the rank count allows.
TEST(DistModel, ThroughputLayoutIsBitIdenticalToOneProcess) {
  SafetensorsFile golden(testing::fixture_dir("k3-tiny-a") + "/golden.safetensors");
  const std::vector<int32_t> prompt = testing::read_i32(golden, "p0.prompt_ids");
  const std::vector<int32_t> gen = testing::read_i32(golden, "p0.gen_tokens");
  const std::vector<float> want_prefill = testing::read_f32(golden, "p0.prefill_logits");
  const std::vector<int32_t> forced(gen.begin(), gen.begin() + 4);
  ModelOptions mapped;
  mapped.residency = Residency::kMapped;
  auto whole_model = Model::load(testing::fixture_dir("k3-tiny-a"), mapped);
  Outputs whole;
  // Three sequences at different positions decoding in one step.
  auto batched_step = [&](Model& model) {
    std::vector<SequenceState> states;
    std::vector<std::vector<int32_t>> next;
    for (int i = 0; i < 3; ++i) {
      states.push_back(model.new_sequence());
      const std::vector<int32_t> p(prompt.begin(), prompt.begin() + std::min<size_t>(prompt.size(), 1 + 2 * i));
      prefill_logits(model, states.back(), p, 4);
      next.push_back({gen[static_cast<size_t>(i)], gen[static_cast<size_t>(i + 1)]});
    }
    std::vector<SequenceInput> in;
    for (int i = 0; i < 3; ++i) in.push_back({&states[static_cast<size_t>(i)], next[static_cast<size_t>(i)], true});
    std::vector<float> out;
    model.forward(in, &out);
    return out;
  };
  std::vector<float> whole_batch;
  {
    SerialScope alone;
    whole = run_fixture(*whole_model, prompt, forced, 6);
    whole_batch = batched_step(*whole_model);
  }
  for (int replicas = 0; replicas < dist::size(); ++replicas) {
    SCOPED_TRACE(::testing::Message() << "rank " << dist::rank() << " of " << dist::size() << ", " << replicas
                                      << " replicas");
    ModelOptions opt;
    opt.layout = dist::Layout::kThroughput;
    opt.expert_replicas = replicas;
    auto model = Model::load(testing::fixture_dir("k3-tiny-a"), opt);
    const MoeWeights& moe = model->weights().layers[1].moe_w;
    EXPECT_EQ(moe.placement.parallel(), dist::size() > 1);
    const Outputs spread = run_fixture(*model, prompt, forced, 6);
    EXPECT_TRUE(bits_equal(spread.prefill, whole.prefill));
    EXPECT_TRUE(bits_equal(spread.decode, whole.decode));
    EXPECT_EQ(spread.greedy, whole.greedy);
    EXPECT_TRUE(bits_equal(batched_step(*model), whole_batch));
    EXPECT_LE(rel(spread.prefill, want_prefill), kLogitsMaxRel);
  }
}

}  // namespace
}  // namespace k3

namespace k3 {
namespace {

// What one decoded token after a 4-token prompt sends and receives through the exchanges.
dist::Traffic decode_step_traffic(const Model& model) {
  SequenceState s = model.new_sequence();
  prefill_logits(model, s, {5, 7, 11, 13}, 4);
  const int32_t next = 17;
  dist::reset_traffic();
  std::vector<float> step;
  SequenceInput in{&s, std::span<const int32_t>(&next, 1), false};
  model.forward(std::span<const SequenceInput>(&in, 1), &step);
  return dist::traffic();
}

// What `k3 inspect --ranks R` predicts a decoded token sends and receives is what it does.
// A matrix holding only this rank's rows is never computed whole: asked to, linear refuses.
TEST(DistModel, OwnRowsAreNeverComputedWhole) {
  if (dist::size() == 1) GTEST_SKIP() << "needs several ranks (dist_test_np*)";
  auto model = Model::load(testing::fixture_dir("k3-tiny-a"));
  const Matrix& o = model->weights().layers[0].kda.o;
  ASSERT_TRUE(o.own_rows_only);
  std::vector<float> x(o.cols, 1.0f), y(o.rows);
  SerialScope alone;
  const std::string err = testing::error_of([&] { linear(o, x.data(), 1, y.data()); });
  EXPECT_NE(err.find("holds only this rank's rows"), std::string::npos) << err;
}

TEST(DistModel, DecodeTrafficIsWhatThePartitionPredicts) {
  auto model = Model::load(testing::fixture_dir("k3-tiny-a"));
  const dist::Traffic t = decode_step_traffic(*model);
  const RankFootprint f = rank_footprint(model->weights(), model->text(), dist::rank(), dist::size());
  EXPECT_EQ(t.bytes_sent, f.sent_per_token);
  EXPECT_EQ(t.bytes_received, f.received_per_token);
  EXPECT_EQ(t.collectives, f.collectives_per_token);
  if (dist::size() > 1) {
    EXPECT_GT(t.bytes_received, 0u);
  }
}

// In the throughput layout a rank's share of a step's pairs depends on the routing, so the
// per-rank prediction is the mean: the job's total is exact, and so is every rank's when each
// holds a copy of every expert and the pairs divide evenly.
TEST(DistModel, ThroughputTrafficIsWhatThePartitionPredicts) {
  const int R = dist::size();
  for (int replicas : {0, R - 1}) {
    ModelOptions opt;
    opt.layout = dist::Layout::kThroughput;
    opt.expert_replicas = replicas;
    auto model = Model::load(testing::fixture_dir("k3-tiny-a"), opt);
    const dist::Traffic t = decode_step_traffic(*model);
    const RankFootprint f =
        rank_footprint(model->weights(), model->text(), dist::rank(), R, dist::Layout::kThroughput, replicas);
    EXPECT_EQ(t.collectives, f.collectives_per_token);
    std::vector<uint64_t> mine = {t.bytes_sent, f.sent_per_token}, all(2 * static_cast<size_t>(R));
    dist::allgather_u64(mine.data(), 2, all.data());
    uint64_t sent = 0, predicted = 0;
    for (int k = 0; k < R; ++k) {
      sent += all[2 * static_cast<size_t>(k)];
      predicted += all[2 * static_cast<size_t>(k) + 1];
    }
    EXPECT_NEAR(static_cast<double>(sent), static_cast<double>(predicted), R);
    if (replicas == R - 1 && model->text().top_k % R == 0) {
      EXPECT_EQ(t.bytes_sent, f.sent_per_token);
    }
  }
}

}  // namespace
}  // namespace k3
