// The MoonViT-V2 tower and patchmergerv2 projector against vision-tiny-a: every stage of the
// fp32 path (pos_emb, patch_embed, each block, encoder_out, merged, projector_out) from the
// golden pixel_values within the fixture's 1e-4, on every kernel dispatch path; the packed batch
// against batch.* and against the per-image runs; config and weight validation.
#include <gtest/gtest.h>

#include "base/cpu_features.h"
#include "base/error.h"
#include "support/test_support.h"
#include "vision/vision_model.h"
#include "vision_fixture.h"

namespace k3 {
namespace {

using testing::Diff;

std::vector<GridThw> golden_grids(const testing::VisionFixture& fx, int first, int count) {
  std::vector<GridThw> g;
  for (int i = first; i < first + count; ++i) {
    const std::vector<int64_t> v = fx.i64(cat("img", i, ".grid_thw"));
    g.push_back({static_cast<int>(v[0]), static_cast<int>(v[1]), static_cast<int>(v[2])});
  }
  return g;
}

class VisionFixtureTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (GetParam() > best_isa()) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam());
    saved_ = active_isa();
    force_isa(GetParam());
    model_ = VisionModel::load(fx_.dir);
  }
  void TearDown() override { force_isa(saved_); }

  void expect_close(const char* stage, int image, const std::vector<float>& got, const std::string& golden) {
    Diff d;
    d.add(got, fx_.f32(golden));
    EXPECT_LE(d.max_abs, fx_.tolerance("fp32_path")) << stage << " of image " << image;
    std::printf("[ %-6s ] image %d %-13s max_abs %.3g  rel %.3g\n", isa_name(GetParam()), image, stage, d.max_abs,
                d.rel());
  }

  Isa saved_ = Isa::kRef;
  testing::VisionFixture fx_;
  std::unique_ptr<VisionModel> model_;
};

TEST_P(VisionFixtureTest, EveryStageOfEachImage) {
  for (int i = 0; i < fx_.images(); ++i) {
    const std::vector<GridThw> grid = golden_grids(fx_, i, 1);
    VisionTrace trace;
    const std::vector<float> out = model_->encode(fx_.f32(cat("img", i, ".pixel_values")), grid, &trace);
    const std::string p = cat("img", i, ".");
    expect_close("pos_emb", i, trace.pos_emb, p + "pos_emb");
    expect_close("patch_embed", i, trace.patch_embed, p + "patch_embed");
    ASSERT_EQ(trace.blocks.size(), 3u);
    for (int b = 0; b < 3; ++b) expect_close(cat("block", b).c_str(), i, trace.blocks[b], cat(p, "block", b));
    expect_close("encoder_out", i, trace.encoder_out, p + "encoder_out");
    expect_close("merged", i, trace.merged, p + "merged");
    expect_close("projector_out", i, out, p + "projector_out");
    EXPECT_EQ(static_cast<int64_t>(out.size()), fx_.image(i)["num_tokens"].get<int64_t>() * 128);
  }
}

TEST_P(VisionFixtureTest, PackedBatchMatchesGoldenAndSingleRuns) {
  const int n = fx_.images();
  std::vector<float> pixels;
  std::vector<float> singles;
  for (int i = 0; i < n; ++i) {
    const std::vector<float> p = fx_.f32(cat("img", i, ".pixel_values"));
    pixels.insert(pixels.end(), p.begin(), p.end());
    const std::vector<float> one = model_->encode(p, golden_grids(fx_, i, 1));
    singles.insert(singles.end(), one.begin(), one.end());
  }
  const std::vector<GridThw> grids = golden_grids(fx_, 0, n);
  std::vector<int64_t> cu{0};
  for (const GridThw& g : grids) cu.push_back(cu.back() + g.patches());
  EXPECT_EQ(cu, fx_.meta["batch"]["cu_seqlens"].get<std::vector<int64_t>>());

  VisionTrace trace;
  const std::vector<float> out = model_->encode(pixels, grids, &trace);
  expect_close("batch.enc", -1, trace.encoder_out, "batch.encoder_out");
  expect_close("batch.proj", -1, out, "batch.projector_out");
  // Attention is block-diagonal and every kernel is batch-invariant: exactly the single runs.
  EXPECT_EQ(out, singles);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, VisionFixtureTest, ::testing::Values(Isa::kRef, Isa::kAvx2, Isa::kAvx512, Isa::kAmx),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

std::string load_error(const std::string& dir) {
  return testing::error_message([&] { VisionModel::load(dir); });
}

TEST(VisionLoad, ConfigProblemsAreReportedTogether) {
  testing::TempDir tmp;
  testing::copy_dir(testing::fixture_dir("vision-tiny-a"), tmp.path());
  auto cfg = nlohmann::json::parse(testing::read_file(tmp.file("config.json")));
  auto& v = cfg["vision_config"];
  v.erase("vt_hidden_size");
  v["mm_projector_type"] = "patchmerger";
  v["attn_bias"] = true;
  v["pos_emb_interpolation_mode"] = "bicubic";
  v["qkv_hidden_size"] = 97;
  testing::write_file(tmp.file("config.json"), cfg.dump());
  const std::string m = load_error(tmp.path());
  for (const char* s : {"vision_config.vt_hidden_size: missing", "vision_config.mm_projector_type: 'patchmerger'",
                        "vision_config.attn_bias", "vision_config.pos_emb_interpolation_mode: 'bicubic'",
                        "vision_config.qkv_hidden_size: 97", "config.json"})
    EXPECT_NE(m.find(s), std::string::npos) << s << " not in: " << m;

  cfg.erase("vision_config");
  testing::write_file(tmp.file("config.json"), cfg.dump());
  EXPECT_NE(load_error(tmp.path()).find("no 'vision_config'"), std::string::npos);
}

TEST(VisionLoad, WeightProblemsAreReportedTogether) {
  testing::TempDir tmp;
  testing::copy_dir(testing::fixture_dir("vision-tiny-a"), tmp.path());
  testing::rewrite_safetensors(
      tmp.file("model.safetensors"),
      [](testing::TensorEdit& t) {
        if (t.name == "vision_tower.encoder.blocks.1.wo.weight") return false;  // missing
        if (t.name == "mm_projector.proj.2.weight") t.shape = {256, 128};       // wrong shape
        if (t.name == "vision_tower.encoder.blocks.0.norm0.weight") {           // wrong dtype
          t.dtype = DType::kI16;
        }
        return true;
      },
      {{"vision_tower.encoder.blocks.0.wqkv.bias", DType::kBF16, {288}, std::vector<uint8_t>(576, 0)}});
  const std::string m = load_error(tmp.path());
  for (const char* s : {"missing tensor 'vision_tower.encoder.blocks.1.wo.weight'",
                        "'mm_projector.proj.2.weight' has shape [256, 128], expected [128, 256]",
                        "'vision_tower.encoder.blocks.0.norm0.weight' has dtype I16",
                        "unexpected tensor 'vision_tower.encoder.blocks.0.wqkv.bias'"})
    EXPECT_NE(m.find(s), std::string::npos) << s << " not in: " << m;
}

// Rewrites the fixture's JSON files in a temporary copy.
struct EditedFixture {
  testing::TempDir tmp;
  nlohmann::json config, preprocessor;
  EditedFixture() {
    testing::copy_dir(testing::fixture_dir("vision-tiny-a"), tmp.path());
    config = nlohmann::json::parse(testing::read_file(tmp.file("config.json")));
    preprocessor = nlohmann::json::parse(testing::read_file(tmp.file("preprocessor_config.json")));
  }
  std::string load_error() {
    testing::write_file(tmp.file("config.json"), config.dump());
    testing::write_file(tmp.file("preprocessor_config.json"), preprocessor.dump());
    return testing::error_message([&] { VisionModel::load(tmp.path()); });
  }
};

// vt_num_hidden_layers is only a number in config.json: 2^30 allocated 2^30 block slots
// (std::bad_alloc, or the OOM killer) and 200000 built a 100 MB message of missing tensors.
// The first block the checkpoint lacks entirely is now one problem.
TEST(VisionLoad, LayerCountBeyondTheCheckpointIsOneProblem) {
  for (int layers : {1 << 30, 200000, 4}) {
    EditedFixture fx;
    fx.config["vision_config"]["vt_num_hidden_layers"] = layers;
    const std::string m = fx.load_error();
    EXPECT_NE(m.find(cat("vision_config.vt_num_hidden_layers is ", layers,
                         " but the checkpoint has no tensors for vision block 3 "
                         "(vision_tower.encoder.blocks.3.*); it has 3 blocks")),
              std::string::npos)
        << m.substr(0, 2000);
    EXPECT_LT(m.size(), 2000u);
  }
}

// merge_kernel_size [2.5, 2] was truncated to [2, 2] and accepted.
TEST(VisionLoad, MergeKernelMustBeExactlyTwoByTwo) {
  EditedFixture fx;
  fx.config["vision_config"]["merge_kernel_size"] = {2.5, 2};
  const std::string m = fx.load_error();
  EXPECT_NE(m.find("vision_config.merge_kernel_size: only [2, 2] is supported"), std::string::npos) << m;
}

// A preprocessor that lets images grow past the tower's 512 patches a side loaded, then failed
// every large image at encode time with a message about its grid.
TEST(VisionLoad, PatchLimitBeyondTheTowerIsALoadError) {
  EditedFixture fx;
  fx.preprocessor["media_proc_cfg"]["patch_limit_on_one_side"] = 1000;
  const std::string m = fx.load_error();
  EXPECT_NE(m.find("preprocessor_config.json patch_limit_on_one_side (1000) lets images reach 1000 patches a "
                   "side; the vision tower takes at most 512"),
            std::string::npos)
      << m;
  fx.preprocessor["media_proc_cfg"]["patch_limit_on_one_side"] = 513;  // padded to 514
  EXPECT_NE(fx.load_error().find("reach 514 patches a side"), std::string::npos);
  fx.preprocessor["media_proc_cfg"]["patch_limit_on_one_side"] = 511;  // padded to 512: fine
  EXPECT_EQ(fx.load_error(), "(no error)");
}

TEST(VisionLoad, RejectsBadGrids) {
  auto model = VisionModel::load(testing::fixture_dir("vision-tiny-a"));
  std::vector<float> pixels(4 * 588);
  const std::vector<GridThw> odd = {{1, 1, 4}};
  EXPECT_THROW(model->encode(pixels, odd), Error);
  const std::vector<GridThw> video = {{2, 2, 1}};
  EXPECT_THROW(model->encode(pixels, video), Error);
  const std::vector<GridThw> wrong_count = {{1, 2, 4}};
  EXPECT_THROW(model->encode(pixels, wrong_count), Error);
}

}  // namespace
}  // namespace k3
