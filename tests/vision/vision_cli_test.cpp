// `k3 vision-embed` against vision-tiny-a: all four images packed in one run give the golden
// pixel_values, grid_thw and batch projector output; a bad image is a clean error.
#include <gtest/gtest.h>

#include "base/error.h"
#include "support/test_support.h"
#include "vision_fixture.h"

namespace k3 {
namespace {

TEST(VisionEmbedCli, FixtureImagesPacked) {
  const testing::VisionFixture fx;
  testing::TempDir tmp;
  std::string args = "vision-embed --model " + fx.dir + " --out " + tmp.file("out.safetensors");
  for (int i = 0; i < fx.images(); ++i) args += " --image " + fx.image_path(i);
  const testing::CommandResult r = testing::run_k3(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;

  const SafetensorsFile out(tmp.file("out.safetensors"));
  std::vector<float> want_pixels;
  std::vector<int32_t> want_grids;
  for (int i = 0; i < fx.images(); ++i) {
    const std::vector<float> p = fx.f32(cat("img", i, ".pixel_values"));
    want_pixels.insert(want_pixels.end(), p.begin(), p.end());
    for (int64_t v : fx.i64(cat("img", i, ".grid_thw"))) want_grids.push_back(static_cast<int32_t>(v));
  }
  ASSERT_NE(out.find("pixel_values"), nullptr);
  EXPECT_EQ(out.find("pixel_values")->shape, (std::vector<int64_t>{80, 3, 14, 14}));
  EXPECT_EQ(out.find("grid_thw")->shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(out.find("projector_out")->shape, (std::vector<int64_t>{20, 128}));
  EXPECT_EQ(testing::read_i32(out, "grid_thw"), want_grids);
  testing::Diff pix, proj;
  pix.add(testing::read_f32(out, "pixel_values"), want_pixels);
  proj.add(testing::read_f32(out, "projector_out"), fx.f32("batch.projector_out"));
  EXPECT_LE(pix.max_abs, fx.tolerance("pixel_values"));
  EXPECT_LE(proj.max_abs, fx.tolerance("fp32_path"));
}

TEST(VisionEmbedCli, BadImageIsACleanError) {
  testing::TempDir tmp;
  testing::write_file(tmp.file("bad.png"), "\x89PNG\r\n\x1a\n garbage");
  const testing::CommandResult r =
      testing::run_k3("vision-embed --model " + testing::fixture_dir("vision-tiny-a") + " --image " +
                      tmp.file("bad.png") + " --out " + tmp.file("o.safetensors"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("k3: error: " + tmp.file("bad.png") + ": invalid PNG"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace k3
