// Binding a checkpoint to its config: every problem reported together, by name.
#include <gtest/gtest.h>

#include <cstring>

#include "base/error.h"
#include "kernels/mxfp4.h"
#include "model/k3_model.h"
#include "support/test_support.h"

namespace k3 {
namespace {

const char* kPrefix = "language_model.model.layers.";

std::string load_error(const std::string& dir) {
  try {
    Model::load(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class WeightsTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::copy_dir(testing::fixture_dir("k3-tiny-a"), dir_.path() + "/m"); }
  std::string dir() const { return dir_.path() + "/m"; }
  testing::TempDir dir_;
};

TEST_F(WeightsTest, FixtureBindsAndCounts) {
  auto m = Model::load(dir());
  EXPECT_EQ(m->weights().layers.size(), 13u);
  EXPECT_EQ(m->weights().layers[1].moe_w.experts[0].gate.format, WeightFormat::kMxfp4);
  EXPECT_EQ(m->weights().layers[0].kda.q.format, WeightFormat::kBF16);
  EXPECT_EQ(m->weights().layers[0].kda.a_log.size(), 4u);  // per head, sliced from head_dim entries
  EXPECT_TRUE(m->weights().unused_tensors.empty());
}

TEST_F(WeightsTest, AllProblemsReportedTogether) {
  const std::string missing = std::string(kPrefix) + "2.self_attn.f_a_proj.weight";
  const std::string shaped = std::string(kPrefix) + "3.self_attn.kv_b_proj.weight";
  const std::string typed = std::string(kPrefix) + "5.self_attn.A_log";
  testing::drop_tensor(dir(), missing);
  testing::rewrite_safetensors(testing::shard_of(dir(), shaped), [&](testing::TensorEdit& e) {
    if (e.name == shaped) e.shape = {e.shape[1], e.shape[0]};
    return true;
  });
  testing::rewrite_safetensors(testing::shard_of(dir(), typed), [&](testing::TensorEdit& e) {
    if (e.name == typed) {
      e.dtype = DType::kI32;
    }
    return true;
  });
  const std::string err = load_error(dir());
  EXPECT_NE(err.find("3 problems"), std::string::npos) << err;
  EXPECT_NE(err.find("missing tensor '" + missing + "'"), std::string::npos) << err;
  EXPECT_NE(err.find("'" + shaped + "' has shape [32, 128], expected [128, 32]"), std::string::npos) << err;
  EXPECT_NE(err.find("'" + typed + "' has dtype I32"), std::string::npos) << err;
}

TEST_F(WeightsTest, MissingExpertNamesThePackedTensor) {
  testing::drop_tensor(dir(), std::string(kPrefix) + "4.block_sparse_moe.experts.6.w2.weight_packed");
  testing::drop_tensor(dir(), std::string(kPrefix) + "4.block_sparse_moe.experts.6.w2.weight_scale");
  const std::string err = load_error(dir());
  EXPECT_NE(err.find("experts.6.w2.weight_packed' (expected U8 [64, 16]"), std::string::npos) << err;
}

TEST_F(WeightsTest, NaNScaleRejected) {
  const std::string name = std::string(kPrefix) + "7.block_sparse_moe.experts.1.w3.weight_scale";
  testing::rewrite_safetensors(testing::shard_of(dir(), name), [&](testing::TensorEdit& e) {
    if (e.name == name) e.bytes[5] = 0xFF;
    return true;
  });
  const std::string err = load_error(dir());
  EXPECT_NE(err.find("E8M0 scale 0xFF (NaN) at row 2, group 1"), std::string::npos) << err;
}

// The NaN scan also notes which MXFP4 matrices have no 0x00 scale (the kernels' fast path); a
// zero written into one expert's scales clears that mark for it alone.
TEST_F(WeightsTest, ZeroScaleClearsZeroFreeMark) {
  const std::string name = std::string(kPrefix) + "7.block_sparse_moe.experts.1.w3.weight_scale";
  testing::rewrite_safetensors(testing::shard_of(dir(), name), [&](testing::TensorEdit& e) {
    if (e.name == name) e.bytes[5] = 0x00;
    return true;
  });
  auto m = Model::load(dir());
  const Matrix& hit = m->weights().layers[7].moe_w.experts[1].up;
  EXPECT_FALSE(hit.scales_zero_free);
  int marked = 0;
  for (const auto& layer : m->weights().layers)
    for (const auto& ex : layer.moe_w.experts)
      for (const Matrix* w : {&ex.gate, &ex.up, &ex.down}) {
        if (w->format != WeightFormat::kMxfp4) continue;
        const size_t n = static_cast<size_t>(w->rows * (w->cols / 32));
        EXPECT_EQ(w->scales_zero_free, !scan_mxfp4_scales(w->scales, n).has_zero);
        marked += w->scales_zero_free ? 1 : 0;
      }
  EXPECT_GT(marked, 0);
}

TEST_F(WeightsTest, MisalignedTensorsAreRealigned) {
  // An odd-sized tensor at offset 0 leaves every following tensor misaligned in the file.
  const std::string shard = testing::shard_of(dir(), std::string(kPrefix) + "0.self_attn.q_proj.weight");
  testing::rewrite_safetensors(
      shard, [](testing::TensorEdit&) { return true; }, {{"aaa.odd", DType::kU8, {3}, {1, 2, 3}}});
  auto aligned = Model::load(testing::fixture_dir("k3-tiny-a"));
  auto shifted = Model::load(dir());
  EXPECT_EQ(shifted->weights().unused_tensors, std::vector<std::string>{"aaa.odd"});
  std::vector<float> a, b;
  const int32_t tok = 5;
  SequenceState sa = aligned->new_sequence(), sb = shifted->new_sequence();
  SequenceInput ia{&sa, std::span<const int32_t>(&tok, 1), false}, ib{&sb, std::span<const int32_t>(&tok, 1), false};
  aligned->forward(std::span<const SequenceInput>(&ia, 1), &a);
  shifted->forward(std::span<const SequenceInput>(&ib, 1), &b);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace k3
