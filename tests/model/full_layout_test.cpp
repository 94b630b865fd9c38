// The released Kimi K3 layout at its true scale -- 93 layers, 896 experts, 96 shards, 497,220
// tensors, 1.56 TB -- written as file holes (k3 synth --preset k3 --sparse), loaded, validated and
// run for a prefill and a decoded token within a weight budget of a few GB.  Zero weights give
// zero logits; what this catches is anything that only breaks at the real scale (a load that
// reads expert bytes, a quadratic header parse, a buffer sized by the context, a budget the
// placement overruns).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "model/k3_model.h"
#include "support/test_support.h"
#include "synth/synth_checkpoint.h"

namespace k3 {
namespace {

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM"); 0 if unreadable.
uint64_t status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;
  return 0;
}

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(FullLayout, LoadsValidatesAndDecodesUnderASmallBudget) {
  testing::TempDir tmp;
  SynthOptions so;
  so.preset = "k3";
  so.sparse = true;
  write_synth_checkpoint(tmp.path(), so);

  const uint64_t rss_before = status_bytes("VmRSS");
  ModelOptions mo;
  mo.residency = Residency::kStreamed;
  mo.weight_budget = uint64_t{4} << 30;
  auto t0 = std::chrono::steady_clock::now();
  const auto model = Model::load(tmp.path(), mo);
  const double load_s = seconds(t0);
  const uint64_t rss_loaded = status_bytes("VmRSS");
  std::printf("full layout: load + validate %.1f s, metadata %.0f MB resident\n", load_s,
              (rss_loaded - rss_before) / 1e6);
  EXPECT_LT(load_s, 120.0) << "loading must not read the weights";

  const ModelWeights& w = model->weights();
  EXPECT_EQ(w.tensor_count + w.unused_tensors.size(), 497'220u);
  EXPECT_EQ(w.unused_tensors.size(), 168u);  // the vision tower and projector
  EXPECT_NEAR(static_cast<double>(w.total_params), 2.779e12, 0.001e12);
  ASSERT_NE(model->weight_store(), nullptr);
  const WeightStoreStats layout = model->weight_store()->stats();
  EXPECT_FALSE(layout.trunk_resident);
  EXPECT_EQ(layout.expert_count, 92 * 896);
  EXPECT_LE(layout.ring_bytes + layout.expert_slots * layout.expert_slot_bytes, mo.weight_budget);

  // A 3-token prefill, then one decoded token: every layer's trunk streams through the ring
  // twice and 16 experts per MoE layer come through the cache.
  SequenceState s = model->new_sequence(1 << 20);
  EXPECT_LT(s.bytes(), uint64_t{512} << 20) << "a sequence reserves nothing for its context up front";
  const std::vector<int32_t> prompt = {163584, 1, 2};
  std::vector<float> logits;
  t0 = std::chrono::steady_clock::now();
  const SequenceInput pre{&s, prompt};
  model->forward(std::span<const SequenceInput>(&pre, 1), &logits);
  const int32_t next = 0;
  const SequenceInput dec{&s, std::span<const int32_t>(&next, 1)};
  model->forward(std::span<const SequenceInput>(&dec, 1), &logits);
  const double run_s = seconds(t0);
  ASSERT_EQ(logits.size(), 2u * 163840);
  for (float x : logits) ASSERT_EQ(x, 0.0f);  // zero weights: zero logits, nothing NaN
  EXPECT_EQ(s.position(), 4);

  const WeightStoreStats st = model->weight_store()->stats();
  const uint64_t peak = status_bytes("VmHWM");
  std::printf("full layout: prefill + 1 decode %.1f s, %.1f GB read (trunk %.1f, experts %.1f), I/O wait %.1f s, "
              "peak RSS %.2f GB with a %.2f GB budget\n",
              run_s, st.bytes_read / 1e9, st.trunk_bytes_read / 1e9, st.expert_bytes_read / 1e9, st.io_wait_seconds,
              peak / 1e9, mo.weight_budget / 1e9);
  EXPECT_GE(st.trunk_bytes_read, 2 * layout.trunk_bytes);
  // Zero routing picks 16 experts per MoE layer in each call; a 32-slot cache cannot keep one
  // call's 1,472 for the next, so both calls read them.
  EXPECT_EQ(st.expert_misses + st.expert_hits, 2u * 92 * 16);
  EXPECT_GE(st.expert_bytes_read, 92u * 16 * layout.expert_slot_bytes / 2);
  // ... and each request reads its expert once (a prefetched expert is not evicted before use).
  EXPECT_LE(st.expert_bytes_read, 2u * 92 * 16 * layout.expert_slot_bytes);
  // Within the budget plus the stated overhead: metadata, activations and one sequence's state
  // (AddressSanitizer's shadow memory and quarantine add their own).
#if defined(__SANITIZE_ADDRESS__)
  constexpr uint64_t kOverhead = uint64_t{4} << 30;
#else
  constexpr uint64_t kOverhead = uint64_t{2} << 30;
#endif
  EXPECT_LT(peak, mo.weight_budget + kOverhead);
}

}  // namespace
}  // namespace k3
