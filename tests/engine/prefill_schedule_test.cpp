// The server's prefill segments (engine/prefill_schedule.h): where they end, how they grow with
// the depth, and that growing them changes no bit wherever prefill_growth_keeps_results says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "base/rng.h"
#include "engine/prefill_schedule.h"
#include "kernels/kda.h"
#include "model/k3_model.h"
#include "support/test_support.h"

namespace k3 {
namespace {

TEST(PrefillSchedule, GrowsWithTheDepthOnItsOwnGrid) {
  const PrefillSchedule s{256, 2048};
  EXPECT_EQ(s.length(0, 100000), 256);
  EXPECT_EQ(s.length(8192, 100000), 256);   // 256 x 32 reaches 8192
  EXPECT_EQ(s.length(8448, 100000), 256);   // 512 from here, to 512's next multiple
  EXPECT_EQ(s.length(8704, 100000), 512);
  EXPECT_EQ(s.length(16384, 100000), 512);
  EXPECT_EQ(s.length(16896, 100000), 512);   // 1024 from here (16.5 x 1024), to 17 x 1024
  EXPECT_EQ(s.length(17408, 100000), 1024);
  EXPECT_EQ(s.length(65536, 100000), 2048);
  EXPECT_EQ(s.length(1 << 20, 2 << 20), 2048) << "chunk_max caps it";
  EXPECT_EQ(s.length(8704, 9000), 296) << "the prompt's end";
  EXPECT_EQ(s.length(8704, 9000, {8960}), 256) << "a store point ends a segment";
  EXPECT_EQ(s.length(8704, 9000, {0, 8704, 12000}), 296) << "store points at or before pos, or past the end, do not";
  const PrefillSchedule fixed{256, 256};
  EXPECT_EQ(fixed.length(1 << 20, 2 << 20), 256);
  const PrefillSchedule below{256, 100};  // chunk_max under the chunk: one chunk
  EXPECT_EQ(below.length(1 << 20, 2 << 20), 256);
}

// From 0 or from any point of the grid (a cached prefix), every segment ends on the grid, at a
// store point or at the prompt's end; none is longer than chunk_max; every store point is hit.
TEST(PrefillSchedule, SegmentsEndOnTheGridAndAtEveryStorePoint) {
  Rng rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t chunk = 16 * (1 + static_cast<int64_t>(rng.below(8)));
    const PrefillSchedule s{chunk, chunk << rng.below(5)};
    const int64_t n = 1 + static_cast<int64_t>(rng.below(40000));
    const int64_t a = static_cast<int64_t>(rng.below(static_cast<uint64_t>(n))) / chunk * chunk;
    const int64_t b = static_cast<int64_t>(rng.below(static_cast<uint64_t>(n))) / chunk * chunk;
    const int64_t start = std::min(a, b) / chunk * chunk;
    bool hit_a = a <= start, hit_b = b <= start;
    for (int64_t pos = start; pos < n;) {
      const int64_t len = s.length(pos, n, {a, b});
      ASSERT_GE(len, 1);
      ASSERT_LE(len, std::max(s.chunk, s.chunk_max));
      pos += len;
      ASSERT_TRUE(pos == n || pos % chunk == 0) << pos;
      hit_a = hit_a || pos == a;
      hit_b = hit_b || pos == b;
    }
    EXPECT_TRUE(hit_a && hit_b) << "n " << n << " stops " << a << ", " << b;
  }
}

// Prefills `prompt` in the schedule's segments; the last position's logits.
std::vector<float> prefill_in(const Model& model, SequenceState& st, const std::vector<int32_t>& prompt,
                              const PrefillSchedule& s, int64_t* segments) {
  std::vector<float> logits;
  *segments = 0;
  const int64_t n = static_cast<int64_t>(prompt.size());
  for (int64_t pos = 0; pos < n; ++(*segments)) {
    const int64_t len = s.length(pos, n);
    const SequenceInput in{&st, std::span<const int32_t>(prompt.data() + pos, static_cast<size_t>(len)), false};
    logits.clear();  // forward appends
    model.forward({&in, 1}, &logits);
    pos += len;
  }
  return logits;
}

// Where prefill_growth_keeps_results holds, grown segments give the one-chunk segments' bits,
// and a decode step after them too.  A prompt of 1500 tokens on the 4096-token fixture model
// makes segments of 32 grow to 64 past position 1024.
TEST(PrefillSchedule, GrowthKeepsTheBitsWhereAllowed) {
  std::unique_ptr<Model> model = Model::load(testing::fixture_dir("k3-tiny-a"));
  Rng rng(8);
  std::vector<int32_t> prompt(1500);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(model->text().vocab_size)));
  EXPECT_FALSE(prefill_growth_keeps_results(*model, kKdaChunk + 16, 8 * kKdaChunk)) << "off the KDA chunk grid";
  EXPECT_TRUE(prefill_growth_keeps_results(*model, kKdaChunk, kKdaChunk)) << "nothing grows";
  model->options().mla.mode = MlaMode::kDecompressed;
  model->options().kda.chunk = 64;
  EXPECT_FALSE(prefill_growth_keeps_results(*model, 32, 256)) << "off the grid of a KDA chunk of 64";
  EXPECT_TRUE(prefill_growth_keeps_results(*model, 128, 1024));
  model->options().kda.chunk = 24;  // the vector kernels run chunks of 32
  EXPECT_FALSE(prefill_growth_keeps_results(*model, 48, 480));
  EXPECT_TRUE(prefill_growth_keeps_results(*model, 96, 960));
  model->options().kda.force_recurrent = true;
  EXPECT_TRUE(prefill_growth_keeps_results(*model, 5, 50)) << "token by token: any grid";
  model->options().kda = KdaOptions{};
  int allowed = 0;
  for (MlaMode mode : {MlaMode::kAuto, MlaMode::kDecompressed, MlaMode::kAbsorbed}) {
    model->options().mla.mode = mode;
    for (int64_t chunk : {kKdaChunk, 4 * kKdaChunk}) {
      const PrefillSchedule one{chunk, chunk}, grown{chunk, 16 * chunk};
      if (!prefill_growth_keeps_results(*model, chunk, grown.chunk_max)) continue;
      ++allowed;
      SCOPED_TRACE(::testing::Message() << "chunk " << chunk << " mode " << static_cast<int>(mode));
      SequenceState a = model->new_sequence(), b = model->new_sequence();
      int64_t segments_one = 0, segments_grown = 0;
      const std::vector<float> want = prefill_in(*model, a, prompt, one, &segments_one);
      const std::vector<float> got = prefill_in(*model, b, prompt, grown, &segments_grown);
      if (chunk == kKdaChunk) {
        EXPECT_LT(segments_grown, segments_one) << "the segments grew";
      }
      EXPECT_TRUE(got == want);
      const int32_t next = 17;
      std::vector<float> la, lb;
      const SequenceInput ia{&a, std::span<const int32_t>(&next, 1), false}, ib{&b, std::span<const int32_t>(&next, 1), false};
      model->forward({&ia, 1}, &la);
      model->forward({&ib, 1}, &lb);
      EXPECT_TRUE(la == lb);
    }
  }
  EXPECT_GE(allowed, 4) << "growth allowed under both fixed MLA forms at least";
}

}  // namespace
}  // namespace k3
