// Streamed weights (model/weight_store.h): the same logits and tokens, bit for bit, at every
// memory budget -- budgets that hold everything, budgets that evict experts at every layer and
// stream the trunk through a ring of one unit -- and the fixture's logits within its tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "engine/generator.h"
#include "engine/sampler.h"
#include "model/k3_model.h"
#include "support/test_support.h"

namespace k3 {
namespace {

struct Outputs {
  std::vector<float> prefill;       // every prompt position's logits
  std::vector<float> decode;        // each greedy step's logits
  std::vector<int32_t> tokens;      // the greedy continuation
};

// Prefill of the fixture's first prompt in chunks of 5 (several forward calls, so the trunk
// ring wraps), then 6 greedy decode steps.
Outputs run_model(const Model& m, const std::vector<int32_t>& prompt) {
  Outputs r;
  SequenceState s = m.new_sequence(256);
  r.prefill = prefill_logits(m, s, prompt, /*chunk=*/5);
  const int64_t V = m.text().vocab_size;
  int32_t next = argmax(&r.prefill[r.prefill.size() - V], V);
  for (int step = 0; step < 6; ++step) {
    r.tokens.push_back(next);
    std::vector<float> logits;
    const SequenceInput in{&s, std::span<const int32_t>(&r.tokens.back(), 1)};
    m.forward(std::span<const SequenceInput>(&in, 1), &logits);
    r.decode.insert(r.decode.end(), logits.begin(), logits.end());
    next = argmax(logits.data(), V);
  }
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::unique_ptr<Model> load(const std::string& dir, Residency r, uint64_t budget = 0) {
  ModelOptions o;
  o.residency = r;
  o.weight_budget = budget;
  return Model::load(dir, o);
}

class WeightStoreTest : public ::testing::Test {
 protected:
  // The smallest budget for the fixture: the trunk streams through a one-unit ring.
  uint64_t probe_budget() const {
    return load(dir_, Residency::kStreamed, uint64_t{1} << 40)->weight_store()->stats().minimum_budget;
  }
  std::string dir_ = testing::fixture_dir("k3-tiny-a");
  SafetensorsFile golden_{dir_ + "/golden.safetensors"};
  std::vector<int32_t> prompt_ = testing::read_i32(golden_, "p0.prompt_ids");
};

TEST_F(WeightStoreTest, LogitsAreByteIdenticalAtEveryBudget) {
  const auto memory = load(dir_, Residency::kMemory);
  ASSERT_EQ(memory->weight_store(), nullptr);
  const Outputs want = run_model(*memory, prompt_);

  // The checkpoint's sizes, from a store that holds everything.
  const auto probe = load(dir_, Residency::kStreamed, uint64_t{1} << 40);
  const WeightStoreStats big = probe->weight_store()->stats();
  ASSERT_TRUE(big.trunk_resident);
  const uint64_t slot = big.expert_slot_bytes, min_cache = big.minimum_budget - big.largest_unit;
  ASSERT_GT(big.expert_bytes_total, 4 * min_cache) << "the fixture must have more experts than the smallest cache";

  struct Case {
    const char* what;
    uint64_t budget;
    bool resident;
  };
  const Case cases[] = {
      {"smallest: a one-unit ring, the fewest expert slots", big.minimum_budget, false},
      {"a ring of 1.5 units", big.minimum_budget + big.largest_unit / 2, false},
      {"half the trunk resident, the rest streamed", big.trunk_bytes / 2 + 2 * big.largest_unit + min_cache, false},
      {"resident trunk, fewest slots", big.trunk_bytes + min_cache, true},
      {"resident trunk, a third of the experts", big.trunk_bytes + big.expert_bytes_total / 3, true},
      {"everything", big.trunk_bytes + big.expert_bytes_total + slot, true},
  };
  setenv("K3_PREDICT_EXPERTS", "1", 1);  // next-layer guesses are opt-in (k3_model.cpp)
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const auto m = load(dir_, Residency::kStreamed, c.budget);
    ASSERT_NE(m->weight_store(), nullptr);
    const WeightStoreStats before = m->weight_store()->stats();
    EXPECT_EQ(before.trunk_resident, c.resident);
    EXPECT_LE(before.ring_bytes + before.expert_slots * slot + before.trunk_resident_bytes, c.budget);
    EXPECT_EQ(before.trunk_resident_bytes == before.trunk_bytes, c.resident);
    const Outputs got = run_model(*m, prompt_);
    EXPECT_TRUE(same_bits(got.prefill, want.prefill));
    EXPECT_TRUE(same_bits(got.decode, want.decode));
    EXPECT_EQ(got.tokens, want.tokens);
    const WeightStoreStats after = m->weight_store()->stats();
    EXPECT_GT(after.expert_misses, 0u);
    if (!c.resident && c.budget > big.minimum_budget + big.largest_unit) {
      // Partly resident: the resident units are read once, the rest once per forward call.
      EXPECT_GT(before.trunk_resident_bytes, big.trunk_bytes / 4);
      EXPECT_LT(after.trunk_bytes_read, before.trunk_resident_bytes + 14 * (big.trunk_bytes - before.trunk_resident_bytes));
    }
    if (c.budget == big.minimum_budget) {
      // The smallest cache cannot hold a layer's experts across tokens: it reads at every layer.
      EXPECT_GT(after.expert_bytes_read, big.expert_bytes_total);
      EXPECT_GT(after.trunk_bytes_read, 5 * big.trunk_bytes);  // once per forward call
    }
    if (c.resident && c.budget < big.trunk_bytes + big.expert_bytes_total) {
      // Expert-bound: decode steps guess the next layer's experts, and the guesses are read.
      EXPECT_GT(after.expert_predicted, 0u);
      EXPECT_LE(after.expert_predicted_used, after.expert_predicted);
    }
    if (!c.resident) {
      EXPECT_EQ(after.expert_predicted, 0u);  // a streamed trunk is read first
    }
    if (c.budget > big.trunk_bytes + big.expert_bytes_total) {
      EXPECT_LE(after.expert_bytes_read, big.expert_bytes_total);  // each expert read once at most
      EXPECT_GT(after.expert_hits, 0u);
    }
  }

  // Mapped from the page cache (experts checked on first use): the same bits too.
  const auto mapped = load(dir_, Residency::kMapped);
  const Outputs m = run_model(*mapped, prompt_);
  EXPECT_TRUE(same_bits(m.prefill, want.prefill));
  EXPECT_TRUE(same_bits(m.decode, want.decode));
}

TEST_F(WeightStoreTest, SmallestBudgetMeetsTheFixture) {
  const auto probe = load(dir_, Residency::kStreamed, uint64_t{1} << 40);
  const auto m = load(dir_, Residency::kStreamed, probe->weight_store()->stats().minimum_budget);
  SequenceState s = m->new_sequence();
  const std::vector<float> logits = prefill_logits(*m, s, prompt_, static_cast<int64_t>(prompt_.size()));
  const std::vector<float> want = testing::read_f32(golden_, "p0.prefill_logits");
  ASSERT_EQ(logits.size(), want.size());
  double max_abs = 0, max_ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(logits[i]) - want[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[i])));
  }
  EXPECT_LT(max_abs / max_ref, 5e-4);  // the fixture README's tolerance
}

TEST_F(WeightStoreTest, BudgetTooSmallNamesTheMinimum) {
  const auto probe = load(dir_, Residency::kStreamed, uint64_t{1} << 40);
  const uint64_t least = probe->weight_store()->stats().minimum_budget;
  const std::string err = testing::error_of([&] { load(dir_, Residency::kStreamed, least - 1); });
  EXPECT_NE(err.find("is too small for this checkpoint: it needs at least"), std::string::npos) << err;
  EXPECT_NO_THROW(load(dir_, Residency::kStreamed, least));
}

// One memory budget for weights and sequence state: the store gets the budget less the state
// reserve, and the sequences what the store's placement leaves.
TEST_F(WeightStoreTest, MemoryBudgetSplitsBetweenWeightsAndState) {
  const auto probe = load(dir_, Residency::kStreamed, uint64_t{1} << 40);
  const WeightStoreStats big = probe->weight_store()->stats();
  EXPECT_EQ(probe->state_budget(), 0u);  // no memory budget: sequences are not limited
  const uint64_t seq = SequenceState::fixed_bytes(probe->text()) +
                       64 * SequenceState::bytes_per_token(probe->text(), CacheDtype::kF32);
  for (uint64_t weights : {big.minimum_budget, big.trunk_bytes + big.expert_bytes_total / 2}) {
    ModelOptions o;
    o.memory_budget = weights + 3 * seq;
    o.state_reserve = 3 * seq;
    const auto m = Model::load(dir_, o);
    ASSERT_NE(m->weight_store(), nullptr);  // a memory budget streams the weights
    const WeightStoreStats st = m->weight_store()->stats();
    EXPECT_EQ(st.budget, weights);
    const uint64_t held =
        st.trunk_resident_bytes + st.ring_bytes + static_cast<uint64_t>(st.expert_slots) * st.expert_slot_bytes;
    EXPECT_LE(held, weights);
    EXPECT_EQ(m->state_budget(), o.memory_budget - held);
    EXPECT_GE(m->state_budget(), 3 * seq);
    const Outputs got = run_model(*m, prompt_);  // and runs as any budget does
    EXPECT_FALSE(got.tokens.empty());
  }
  // Without a reserve the sequences get an eighth; a reserve that takes everything is refused.
  ModelOptions o;
  o.memory_budget = 8 * big.minimum_budget;
  EXPECT_EQ(Model::load(dir_, o)->weight_store()->stats().budget, 7 * big.minimum_budget);
  o.state_reserve = o.memory_budget;
  const std::string err = testing::error_of([&] { Model::load(dir_, o); });
  EXPECT_NE(err.find("nothing is left for the weights"), std::string::npos) << err;
  o.state_reserve = 0;
  o.weight_budget = o.memory_budget;
  const std::string err2 = testing::error_of([&] { Model::load(dir_, o); });
  EXPECT_NE(err2.find("leaves nothing of the memory budget"), std::string::npos) << err2;
}

TEST_F(WeightStoreTest, NanScaleFailsWhenTheExpertIsRead) {
  testing::TempDir tmp;
  const std::string dir = tmp.path() + "/m";
  testing::copy_dir(dir_, dir);
  // Every expert of layer 1 gets a NaN scale, so whichever the router picks is caught.
  const std::string probe = "language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_scale";
  testing::rewrite_safetensors(testing::shard_of(dir, probe), [&](testing::TensorEdit& e) {
    if (e.name.find("layers.1.block_sparse_moe.experts.") != std::string::npos &&
        e.name.find(".w1.weight_scale") != std::string::npos)
      e.bytes[3] = 0xFF;
    return true;
  });
  // Loading reads no expert bytes, so it succeeds; the first forward call names the tensor.
  for (Residency r : {Residency::kStreamed, Residency::kMapped}) {
    SCOPED_TRACE(residency_name(r));
    const auto m = load(dir, r, r == Residency::kStreamed ? uint64_t{1} << 40 : 0);
    SequenceState s = m->new_sequence();
    const std::string err = testing::error_of([&] { prefill_logits(*m, s, prompt_, 4); });
    EXPECT_NE(err.find("layers.1.block_sparse_moe.experts."), std::string::npos) << err;
    EXPECT_NE(err.find(".w1.weight_scale': E8M0 scale 0xFF (NaN) at row "), std::string::npos) << err;
  }
  // Read into memory, every scale is checked at load, as before.
  const std::string err = testing::error_of([&] { load(dir, Residency::kMemory); });
  EXPECT_NE(err.find("E8M0 scale 0xFF (NaN)"), std::string::npos) << err;
}

TEST_F(WeightStoreTest, AShardThatShrinksFailsTheCallNamingItAndRecovers) {
  testing::TempDir tmp;
  const std::string dir = tmp.path() + "/m";
  testing::copy_dir(dir_, dir);
  // Shard 1 holds the first layers (the embedding, read through the mapping, is in shard 2).
  const std::string shard = dir + "/model-00001-of-000002.safetensors";
  const std::string bytes = testing::read_file(shard);
  const auto memory = load(dir_, Residency::kMemory);
  SequenceState want_state = memory->new_sequence();
  const std::vector<float> want = prefill_logits(*memory, want_state, prompt_, 4);

  const auto m = load(dir, Residency::kStreamed, probe_budget());
  testing::write_file(shard, bytes.substr(0, 4096));
  SequenceState s = m->new_sequence();
  const std::string err = testing::error_of([&] { prefill_logits(*m, s, prompt_, 4); });
  EXPECT_NE(err.find(shard + ": file shrank to 4096 bytes"), std::string::npos) << err;
  // Put back (the same file, so the store's descriptor sees it): the next call reads it again.
  testing::write_file(shard, bytes);
  SequenceState s2 = m->new_sequence();
  EXPECT_TRUE(same_bits(prefill_logits(*m, s2, prompt_, 4), want));
}

TEST(ByteSize, ParsesUnitsAndRejectsNonsense) {
  EXPECT_EQ(parse_byte_size("4096"), 4096u);
  EXPECT_EQ(parse_byte_size("512M"), uint64_t{512} << 20);
  EXPECT_EQ(parse_byte_size("64G"), uint64_t{64} << 30);
  EXPECT_EQ(parse_byte_size("64GiB"), uint64_t{64} << 30);
  EXPECT_EQ(parse_byte_size("1.5T"), uint64_t{3} << 39);
  EXPECT_GT(parse_byte_size("50%"), 0u);
  for (const char* bad : {"", "-1G", "12Q", "G", "150%", "1e30G", " 5G"}) {
    SCOPED_TRACE(bad);
    const std::string err = testing::error_of([&] { parse_byte_size(bad); });
    EXPECT_NE(err.find("memory size '"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace k3
