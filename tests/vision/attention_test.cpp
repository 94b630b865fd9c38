// The tower's flash-style attention (packed_attention) against the plain three-pass reference
// over many shapes -- head sizes that are and are not multiples of the vector width, image
// lengths around the key-block and query-tile sizes, several images packed, scores that grow
// along the keys (so the online softmax rescales) -- on every dispatch path.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/cpu_features.h"
#include "base/rng.h"
#include "vision/vision_attention.h"

namespace k3 {
namespace {

class VisionAttentionTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (GetParam() > best_isa()) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam());
    saved_ = active_isa();
    force_isa(GetParam());
  }
  void TearDown() override { force_isa(saved_); }
  Isa saved_ = Isa::kRef;
};

TEST_P(VisionAttentionTest, MatchesTheReference) {
  struct Case {
    int heads, hd;
    std::vector<int64_t> lengths;
  };
  const std::vector<Case> cases = {
      {2, 24, {1, 5, 63}},   {1, 48, {64, 65, 129}}, {2, 20, {97, 7}},
      {1, 128, {200}},       {3, 8, {300, 2}},       {1, 33, {96, 97, 191}},
  };
  Rng rng(42);
  for (const Case& c : cases) {
    std::vector<int64_t> cu{0};
    for (int64_t n : c.lengths) cu.push_back(cu.back() + n);
    const int64_t N = cu.back(), Q = static_cast<int64_t>(c.heads) * c.hd;
    std::vector<float> qkv(static_cast<size_t>(N * 3 * Q));
    for (int64_t t = 0; t < N; ++t)
      for (int64_t i = 0; i < 3 * Q; ++i) {
        // Keys grow along the sequence: later key blocks hold larger scores.
        const double grow = i >= Q && i < 2 * Q ? 1.0 + static_cast<double>(t % 150) / 40.0 : 1.0;
        qkv[static_cast<size_t>(t * 3 * Q + i)] = static_cast<float>(1.5 * grow * rng.normal());
      }
    std::vector<float> got(static_cast<size_t>(N * Q)), want(got.size());
    packed_attention(qkv.data(), cu, c.heads, c.hd, got.data());
    packed_attention_reference(qkv.data(), cu, c.heads, c.hd, want.data());
    double worst = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << i;
      worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
    }
    EXPECT_LE(worst, 2e-5) << "heads " << c.heads << " hd " << c.hd << " images " << c.lengths.size();
  }
}

// An image's rows do not depend on what is packed with it.
TEST_P(VisionAttentionTest, PackedEqualsAlone) {
  const int heads = 2, hd = 24;
  const int64_t Q = heads * hd;
  const std::vector<int64_t> cu = {0, 70, 70 + 131};
  Rng rng(7);
  std::vector<float> qkv(static_cast<size_t>(cu.back() * 3 * Q));
  for (float& v : qkv) v = static_cast<float>(rng.normal());
  std::vector<float> packed(static_cast<size_t>(cu.back() * Q)), alone(static_cast<size_t>(131 * Q));
  packed_attention(qkv.data(), cu, heads, hd, packed.data());
  const std::vector<int64_t> one = {0, 131};
  packed_attention(qkv.data() + 70 * 3 * Q, one, heads, hd, alone.data());
  EXPECT_EQ(std::vector<float>(packed.begin() + 70 * Q, packed.end()), alone);
}

INSTANTIATE_TEST_SUITE_P(Isas, VisionAttentionTest, ::testing::Values(Isa::kRef, Isa::kAvx2, Isa::kAvx512, Isa::kAmx),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace
}  // namespace k3
