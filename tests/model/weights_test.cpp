// Binding a checkpoint to its config: every problem reported together, by name.
#include <gtest/gtest.h>

#include <cstring>

#include <nlohmann/json.hpp>

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

// A_log may be stored as [head_dim] with only the first num_heads values live; with num_heads >
// head_dim the tensor is too short and reading num_heads values would run into the next tensor.
TEST_F(WeightsTest, ALogShorterThanNumHeadsIsRejected) {
  const int64_t H = 48, D = 4;  // H * D = 192, the fixture's KDA width, so q/k/v keep their shapes
  auto cfg = nlohmann::json::parse(testing::read_file(dir() + "/config.json"));
  cfg["text_config"]["linear_attn_config"]["num_heads"] = H;
  cfg["text_config"]["linear_attn_config"]["head_dim"] = D;
  testing::write_file(dir() + "/config.json", cfg.dump());
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  // Reshape every KDA tensor sized by head_dim or num_heads; A_log keeps [head_dim].
  const std::vector<std::pair<std::string, std::vector<int64_t>>> reshaped = {
      {"self_attn.f_a_proj.weight", {D, 128}}, {"self_attn.f_b_proj.weight", {192, D}},
      {"self_attn.b_proj.weight", {H, 128}},   {"self_attn.o_norm.weight", {D}},
      {"self_attn.A_log", {D}}};
  for (const std::string shard : {"model-00001-of-000002.safetensors", "model-00002-of-000002.safetensors"})
    testing::rewrite_safetensors(dir() + "/" + shard, [&](testing::TensorEdit& e) {
      for (const auto& [suffix, shape] : reshaped)
        if (ends_with(e.name, suffix)) {
          int64_t n = 1;
          for (int64_t x : shape) n *= x;
          e.shape = shape;
          e.bytes.assign(static_cast<size_t>(n) * dtype_size(e.dtype), 0);
        }
      return true;
    });
  const std::string err = load_error(dir());
  EXPECT_NE(err.find("9 problems"), std::string::npos) << err;
  EXPECT_NE(err.find("tensor '" + std::string(kPrefix) +
                     "0.self_attn.A_log' has shape [4] (4 values) but the config needs 48 (one per KDA head, "
                     "num_heads = 48)"),
            std::string::npos)
      << err;
}

// A bogus expert count is caught at the router, whose rows are the experts, instead of checking
// (and allocating) a million experts per layer.
TEST_F(WeightsTest, ExpertCountIsCheckedAgainstTheRouterFirst) {
  auto cfg = nlohmann::json::parse(testing::read_file(dir() + "/config.json"));
  cfg["text_config"]["num_experts"] = 1000000;
  testing::write_file(dir() + "/config.json", cfg.dump());
  const std::string err = load_error(dir());
  EXPECT_NE(err.find("1.block_sparse_moe.gate.weight' has shape [8, 128], expected [1000000, 128]"), std::string::npos)
      << err.substr(0, 2000);
  EXPECT_EQ(err.find("experts.0."), std::string::npos) << err.substr(0, 2000);
}

// Problems are counted in full but only the first ones are kept and shown.
TEST_F(WeightsTest, ManyProblemsAreCountedAndCapped) {
  auto cfg = nlohmann::json::parse(testing::read_file(dir() + "/config.json"));
  cfg["text_config"]["moe_intermediate_size"] = 64;  // every routed expert matrix now has the wrong shape
  testing::write_file(dir() + "/config.json", cfg.dump());
  const std::string err = load_error(dir());
  // 12 MoE layers x (8 experts x 3 MXFP4 matrices x 2 (packed + scale) + 3 shared-expert matrices),
  // far past the 100 kept: the count stays exact.
  EXPECT_NE(err.find("(612 problems)"), std::string::npos) << err.substr(0, 500);
  EXPECT_NE(err.find("\n  ... and 552 more"), std::string::npos) << err.substr(err.size() > 300 ? err.size() - 300 : 0);
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
