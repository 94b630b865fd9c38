// The blocked causal MLA prefill against a plain fp64 decompress-then-attend, on every ISA; and
// its invariances: the same bits whatever the chunking of the prompt or the thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "base/numeric_types.h"
#include "base/thread_pool.h"
#include "kernels/kernel_test_util.h"
#include "kernels/linear.h"
#include "kernels/mla_prefill.h"

namespace k3 {
namespace {

struct Case {
  MlaPrefillShape s;
  int64_t n;  // cache rows: the whole prompt
  Rng rng;
  testing::TestMatrix kv_b;
  std::vector<float> q, cache;  // q [n][heads][qk] for every position; cache [n][width]
  float scale;
  Case(MlaPrefillShape shape, int64_t rows, uint64_t seed, WeightFormat fmt = WeightFormat::kF32)
      : s(shape), n(rows), rng(seed) {
    kv_b = testing::make_matrix(fmt, static_cast<int64_t>(s.heads) * (s.nope + s.vdim), s.lora, rng);
    q = testing::random_vec(rng, n * s.heads * s.qk(), 2.0);  // peaked softmax
    cache = testing::random_vec(rng, n * s.width());
    scale = 1.0f / std::sqrt(static_cast<float>(s.qk()));
  }
  // Runs positions [pos0, pos0 + len) in one call into out [n][heads*vdim].
  template <class Elem>
  void run(const Elem* c, int64_t pos0, int64_t len, std::vector<float>& out) const {
    const int64_t ldo = static_cast<int64_t>(s.heads) * s.vdim;
    mla_prefill_attention(kv_b.m, s, &q[pos0 * s.heads * s.qk()], c, pos0, len, scale, &out[pos0 * ldo], ldo);
  }
  // The chunks in order (their lengths sum to n).
  std::vector<float> chunked(const std::vector<int64_t>& lens) const {
    std::vector<float> out(n * s.heads * s.vdim);
    int64_t pos = 0;
    for (int64_t len : lens) {
      run(cache.data(), pos, len, out);
      pos += len;
    }
    EXPECT_EQ(pos, n);
    return out;
  }
};

// fp64: decompress every key and value through kv_b as stored (dequantised), attend causally.
std::vector<double> reference(const Case& c) {
  const auto& s = c.s;
  const int64_t kvb = s.nope + s.vdim, W = s.width();
  std::vector<float> w(s.lora);
  std::vector<double> out(c.n * s.heads * s.vdim), k(c.n * s.qk()), v(c.n * s.vdim), p(c.n);
  for (int h = 0; h < s.heads; ++h) {
    for (int64_t j = 0; j < c.n; ++j) {
      for (int r = 0; r < kvb; ++r) {
        portable::dequant_row(c.kv_b.m, h * kvb + r, w.data());
        double acc = 0;
        for (int x = 0; x < s.lora; ++x) acc += static_cast<double>(w[x]) * c.cache[j * W + x];
        if (r < s.nope) k[j * s.qk() + r] = acc;
        else v[j * s.vdim + r - s.nope] = acc;
      }
      for (int r = 0; r < s.rope; ++r) k[j * s.qk() + s.nope + r] = c.cache[j * W + s.lora + r];
    }
    for (int64_t i = 0; i < c.n; ++i) {
      const float* qi = &c.q[(i * s.heads + h) * s.qk()];
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int d = 0; d < s.qk(); ++d) dot += static_cast<double>(qi[d]) * k[j * s.qk() + d];
        p[j] = dot * c.scale;
        mx = std::max(mx, p[j]);
      }
      for (int64_t j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - mx));
      for (int d = 0; d < s.vdim; ++d) {
        double acc = 0;
        for (int64_t j = 0; j <= i; ++j) acc += p[j] * v[j * s.vdim + d];
        out[(i * s.heads + h) * s.vdim + d] = acc / sum;
      }
    }
  }
  return out;
}

// Shapes: heads, head widths and latents that are not multiples of the vector length, prompts
// shorter than one key block, crossing key blocks (256) and query tiles (48), a segment that
// starts inside a block; fp32, bf16 and MXFP4 kv_b.
TEST(MlaPrefillAttention, MatchesFp64DecompressedAttention) {
  uint64_t seed = 40;
  for (auto [shape, n, fmt] : std::vector<std::tuple<MlaPrefillShape, int64_t, WeightFormat>>{
           {{1, 8, 0, 8, 16}, 1, WeightFormat::kF32},
           {{3, 5, 3, 7, 19}, 50, WeightFormat::kF32},
           {{2, 16, 8, 16, 32}, 300, WeightFormat::kBF16},
           {{5, 13, 4, 9, 37}, 530, WeightFormat::kF32},
           {{2, 32, 16, 32, 64}, 97, WeightFormat::kMxfp4},
           {{4, 128, 64, 128, 512}, 260, WeightFormat::kBF16}}) {
    SCOPED_TRACE(::testing::Message() << "heads=" << shape.heads << " nope=" << shape.nope << " rope=" << shape.rope
                                      << " vdim=" << shape.vdim << " lora=" << shape.lora << " n=" << n);
    const Case c(shape, n, seed++, fmt);
    const std::vector<double> want = reference(c);
    testing::for_each_isa([&](Isa isa) {
      // One call, and two chunks with the second starting inside a block.
      for (const auto& lens : {std::vector<int64_t>{n}, std::vector<int64_t>{n / 3, n - n / 3}}) {
        if (lens[0] == 0) continue;
        const std::vector<float> got = c.chunked(lens);
        double worst = 0, scale = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          worst = std::max(worst, std::fabs(got[i] - want[i]));
          scale = std::max(scale, std::fabs(want[i]));
        }
        EXPECT_LE(worst, 2e-5 * std::max(1.0, scale)) << isa_name(isa) << " chunks " << lens.size();
      }
    });
  }
}

// A prompt prefilled in chunks of any sizes gives the bits of one call: chunks that cross key
// blocks and query tiles, single tokens, a chunk ending exactly on a block edge.
TEST(MlaPrefillAttention, ChunkedEqualsOneCall) {
  const Case c({3, 16, 8, 16, 40}, 700, 50);
  testing::for_each_isa([&](Isa isa) {
    const std::vector<float> one = c.chunked({700});
    for (const auto& lens : {std::vector<int64_t>{256, 444}, std::vector<int64_t>{1, 255, 1, 47, 49, 347},
                             std::vector<int64_t>{300, 300, 100}, std::vector<int64_t>{512, 188}})
      EXPECT_EQ(c.chunked(lens), one) << isa_name(isa) << " first chunk " << lens[0];
  });
}

TEST(MlaPrefillAttention, ResultDoesNotDependOnThreads) {
  const Case c({7, 16, 8, 16, 48}, 400, 51);
  testing::for_each_isa([&](Isa isa) {
    set_num_threads(1);
    const std::vector<float> one = c.chunked({150, 250});
    set_num_threads(3);
    const std::vector<float> three = c.chunked({150, 250});
    set_num_threads(0);
    EXPECT_EQ(one, three) << isa_name(isa);
  });
}

// A bf16 cache is widened exactly as it is read: the fp32 kernel's bits on the widened cache.
TEST(MlaPrefillAttention, Bf16CacheEqualsFp32OnWidenedCache) {
  Case c({3, 16, 8, 16, 40}, 300, 52);
  std::vector<uint16_t> bits(c.cache.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    bits[i] = f32_to_bf16(c.cache[i]);
    c.cache[i] = bf16_to_f32(bits[i]);
  }
  testing::for_each_isa([&](Isa isa) {
    std::vector<float> a(c.n * c.s.heads * c.s.vdim), b(a.size());
    c.run(c.cache.data(), 0, 100, a);
    c.run(c.cache.data(), 100, 200, a);
    c.run(bits.data(), 0, 100, b);
    c.run(bits.data(), 100, 200, b);
    EXPECT_EQ(a, b) << isa_name(isa);
  });
}

TEST(MlaPrefillAttention, CountsTheCausalTriangle) {
  const MlaPrefillShape s{2, 4, 2, 3, 8};
  // Queries at positions 10, 11, 12 see 11 + 12 + 13 = 36 keys; per key and head qk + vdim = 9.
  EXPECT_DOUBLE_EQ(mla_prefill_attention_macs(s, 10, 3), 36.0 * 2 * 9);
  EXPECT_DOUBLE_EQ(mla_prefill_decompress_macs(s, 10, 3), 13.0 * 2 * 7 * 8);
}

}  // namespace
// The form choice: decode steps and short segments deep in a cache stay absorbed; longer
// segments go decompressed.
TEST(MlaPrefillAttention, ChoosesTheFormWithLessWork) {
  const MlaPrefillShape k3{96, 128, 64, 128, 512};
  EXPECT_FALSE(mla_prefill_prefers_decompressed(k3, 0, 1));
  EXPECT_FALSE(mla_prefill_prefers_decompressed(k3, 100000, 1));
  EXPECT_FALSE(mla_prefill_prefers_decompressed(k3, 0, 16));
  EXPECT_TRUE(mla_prefill_prefers_decompressed(k3, 0, 64));
  EXPECT_TRUE(mla_prefill_prefers_decompressed(k3, 256, 256));
  EXPECT_FALSE(mla_prefill_prefers_decompressed(k3, 16384, 128));
  EXPECT_TRUE(mla_prefill_prefers_decompressed(k3, 16384, 256));
  // 3 queries at positions 2..4 see 12 keys; each query is also projected through W_UK and W_UV.
  EXPECT_DOUBLE_EQ(mla_absorbed_attention_macs(k3, 2, 3), 12.0 * 96 * (512 + 576) + 3.0 * 96 * 256 * 512);
}

}  // namespace k3
