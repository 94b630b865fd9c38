// Single-query softmax attention against a plain fp64 version.
#include <gtest/gtest.h>

#include <cmath>

#include "base/numeric_types.h"
#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/mla_attention.h"
#include "kernels/kernel_test_util.h"

namespace k3 {
namespace {

TEST(Attention, MatchesPlainSoftmax) {
  Rng rng(31);
  for (auto [n, dk, dv] : std::vector<std::tuple<int64_t, int, int>>{{1, 8, 8}, {5, 24, 16}, {77, 576, 512}, {300, 3, 1}}) {
    const int64_t ldk = dk + 3, ldv = dv + 5;  // strided rows
    auto q = testing::random_vec(rng, dk), keys = testing::random_vec(rng, n * ldk), values = testing::random_vec(rng, n * ldv);
    std::vector<float> out(dv), scratch(n);
    const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
    attend_one(q.data(), keys.data(), ldk, values.data(), ldv, n, dk, dv, scale, out.data(), scratch.data());
    std::vector<double> s(n);
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int d = 0; d < dk; ++d) dot += static_cast<double>(q[d]) * keys[j * ldk + d];
      s[j] = dot * scale;
      mx = std::max(mx, s[j]);
    }
    for (auto& x : s) sum += (x = std::exp(x - mx));
    for (int d = 0; d < dv; ++d) {
      double acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += s[j] / sum * values[j * ldv + d];
      EXPECT_NEAR(out[d], acc, 1e-5) << n << " " << d;
    }
  }
}

TEST(Attention, LargeScoresDoNotOverflow) {
  std::vector<float> q = {1000.0f}, keys = {1000.0f, -1000.0f, 999.0f}, values = {1.0f, 2.0f, 3.0f}, out(1), scr(3);
  attend_one(q.data(), keys.data(), 1, values.data(), 1, 3, 1, 1, 1.0f, out.data(), scr.data());
  EXPECT_TRUE(std::isfinite(out[0]));
  EXPECT_NEAR(out[0], 1.0, 1e-6);
}

// Absorbed MLA decode (all heads over the latent cache, blocked, split over tasks of cache rows
// and merged) against a plain fp64 softmax per head, on every ISA.  Shapes: heads not a multiple
// of the micro-kernel tiles or the vector length, contexts not a multiple of the row block
// (256) or the task (mla_detail::task_rows: 256-1024 rows), several tasks of several blocks,
// K3's 576 = 512 + 64 latent and odd widths whose value part ends inside a vector (rope 0: the
// row ends there too).
void expect_mla_matches_fp64(int64_t n, int heads, int lora, int rope, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " heads=" << heads << " lora=" << lora << " rope=" << rope);
  Rng rng(seed);
  const int width = lora + rope;
  auto q = testing::random_vec(rng, heads * width), cache = testing::random_vec(rng, n * width);
  for (float& x : q) x *= 3.0f;  // peaked softmax
  const float scale = 1.0f / std::sqrt(static_cast<float>(width));
  std::vector<std::vector<float>> outs;
  testing::for_each_isa([&](Isa) {
    outs.emplace_back(heads * lora);
    mla_decode_attention(q.data(), cache.data(), n, heads, lora, rope, scale, outs.back().data());
  });
  std::vector<double> s(n);
  for (int h = 0; h < heads; ++h) {
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int d = 0; d < width; ++d) dot += static_cast<double>(q[h * width + d]) * cache[j * width + d];
      s[j] = dot * scale;
      mx = std::max(mx, s[j]);
    }
    for (auto& x : s) sum += (x = std::exp(x - mx));
    for (int c = 0; c < lora; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += s[j] * cache[j * width + c];
      acc /= sum;
      for (size_t i = 0; i < outs.size(); ++i) ASSERT_NEAR(outs[i][h * lora + c], acc, 2e-5) << "isa " << i << " h" << h << " c" << c;
    }
  }
}

TEST(MlaDecodeAttention, MatchesPlainSoftmaxPerHead) {
  uint64_t seed = 32;
  for (auto [n, heads, lora, rope] : std::vector<std::tuple<int64_t, int, int, int>>{
           {1, 1, 8, 0}, {5, 3, 16, 4}, {129, 7, 37, 5}, {1100, 4, 24, 8}, {2500, 9, 64, 16}, {3, 5, 19, 0},
           {65, 17, 40, 24}, {200, 33, 21, 0}, {71, 96, 512, 64}, {1030, 20, 512, 64}, {5000, 96, 512, 64}})
    expect_mla_matches_fp64(n, heads, lora, rope, seed++);
}

// Task sizes depend on the context length only: whole 256-row blocks, 256 to 1024 rows, and a
// 1k context is split (so decode at short contexts runs on several cores).
TEST(MlaDecodeAttention, TaskRowsFollowTheContextOnly) {
  for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{1024}, int64_t{2049}, int64_t{4096}, int64_t{32768}, int64_t{1} << 20}) {
    const int64_t rows = mla_detail::task_rows(n);
    EXPECT_EQ(rows % 256, 0) << n;
    EXPECT_GE(rows, 256) << n;
    EXPECT_LE(rows, 1024) << n;
  }
  EXPECT_EQ(mla_detail::task_rows(1024), 256);  // 4 tasks
  EXPECT_EQ(mla_detail::task_rows(32768), 1024);  // 32 tasks
}

// Fixed task boundaries and merge order: the same bits whatever the thread count.
TEST(MlaDecodeAttention, ResultDoesNotDependOnThreads) {
  Rng rng(33);
  const int64_t n = 6000;  // 6 tasks, so the workers take some
  const int heads = 19, lora = 48, rope = 16, width = lora + rope;
  auto q = testing::random_vec(rng, heads * width), cache = testing::random_vec(rng, n * width);
  testing::for_each_isa([&](Isa) {
    std::vector<float> one(heads * lora), three(heads * lora);
    set_num_threads(1);
    mla_decode_attention(q.data(), cache.data(), n, heads, lora, rope, 0.125f, one.data());
    set_num_threads(3);
    mla_decode_attention(q.data(), cache.data(), n, heads, lora, rope, 0.125f, three.data());
    set_num_threads(0);
    EXPECT_EQ(one, three);
  });
}

// A bf16 cache is widened exactly, block by block, so on every ISA the result is bit for bit the
// fp32 kernel's on the widened cache (shapes with short last blocks, several tasks, odd widths).
TEST(MlaDecodeAttention, Bf16CacheEqualsFp32KernelOnWidenedCache) {
  Rng rng(34);
  for (auto [n, heads, lora, rope] : std::vector<std::tuple<int64_t, int, int, int>>{
           {1, 1, 8, 0}, {5, 3, 16, 4}, {129, 7, 37, 5}, {300, 96, 512, 64}, {2500, 9, 64, 16}, {1030, 20, 21, 3}}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n << " heads=" << heads << " lora=" << lora << " rope=" << rope);
    const int width = lora + rope;
    auto q = testing::random_vec(rng, heads * width), cache = testing::random_vec(rng, n * width);
    std::vector<uint16_t> bits(cache.size());
    std::vector<float> wide(cache.size());
    for (size_t i = 0; i < cache.size(); ++i) {
      bits[i] = f32_to_bf16(cache[i]);
      wide[i] = bf16_to_f32(bits[i]);
    }
    testing::for_each_isa([&](Isa isa) {
      std::vector<float> a(heads * lora), b(heads * lora);
      mla_decode_attention(q.data(), wide.data(), n, heads, lora, rope, 0.07f, a.data());
      mla_decode_attention(q.data(), bits.data(), n, heads, lora, rope, 0.07f, b.data());
      EXPECT_EQ(a, b) << isa_name(isa);
    });
  }
}

}  // namespace
}  // namespace k3
