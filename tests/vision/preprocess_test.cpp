// The released preprocessing: the navit geometry's checked vectors (from the release), and
// the vision-tiny-a images decoded and preprocessed to the golden pixel_values within 1e-6.
#include "vision/preprocess.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "base/error.h"
#include "support/test_support.h"
#include "vision/image_decode.h"
#include "vision/media_config.h"
#include "vision/pil_resize.h"
#include "vision_fixture.h"

namespace k3 {
namespace {

TEST(NavitResize, CheckedVectorsFromTheSpec) {
  const MediaProcConfig released;  // in_patch_limit 65536, 512 per side
  struct Case {
    int w, h, limit;
    int rw, rh, gh, gw;
    int64_t tokens;
  };
  const Case cases[] = {
      {225, 223, 65536, 225, 223, 16, 18, 72},        {3585, 3585, 65536, 3585, 3585, 258, 258, 16641},
      {100000, 100, 65536, 7167, 7, 2, 512, 256},     {28, 28, 3, 24, 24, 2, 2, 1},
      {1920, 1080, 65536, 1920, 1080, 78, 138, 2691}, {1861, 7041, 65536, 1850, 7002, 502, 134, 16817},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.w << "x" << c.h << " limit " << c.limit);
    MediaProcConfig cfg = released;
    cfg.in_patch_limit = c.limit;
    const NavitGeometry g = navit_resize_geometry(c.w, c.h, cfg);
    EXPECT_EQ(g.resized_width, c.rw);
    EXPECT_EQ(g.resized_height, c.rh);
    EXPECT_EQ(g.grid.t, 1);
    EXPECT_EQ(g.grid.h, c.gh);
    EXPECT_EQ(g.grid.w, c.gw);
    EXPECT_EQ(g.num_tokens, c.tokens);
    EXPECT_EQ((g.resized_width + g.pad_width) % 28, 0);
    EXPECT_EQ((g.resized_height + g.pad_height) % 28, 0);
  }
}

TEST(Preprocess, FixtureGeometryAndPixels) {
  const testing::VisionFixture fx;
  const MediaProcConfig cfg = load_media_proc_config(fx.dir);
  EXPECT_EQ(cfg.in_patch_limit, 32);  // the fixture's, not the released default
  for (int i = 0; i < fx.images(); ++i) {
    SCOPED_TRACE(fx.image_path(i));
    const auto& m = fx.image(i);
    const Image img = load_image_file(fx.image_path(i));
    EXPECT_EQ(img.width, m["width"].get<int>());
    EXPECT_EQ(img.height, m["height"].get<int>());
    EXPECT_EQ(img.channels, m["mode"] == "RGBA" ? 4 : 3);
    const PreprocessedImage p = preprocess_image(img, cfg);
    EXPECT_EQ(p.geometry.resized_width, m["resize"]["new_width"].get<int>());
    EXPECT_EQ(p.geometry.resized_height, m["resize"]["new_height"].get<int>());
    EXPECT_EQ(p.geometry.pad_width, m["resize"]["pad_width"].get<int>());
    EXPECT_EQ(p.geometry.pad_height, m["resize"]["pad_height"].get<int>());
    const std::vector<int64_t> grid = fx.i64(cat("img", i, ".grid_thw"));
    EXPECT_EQ(grid, (std::vector<int64_t>{p.grid().t, p.grid().h, p.grid().w}));
    EXPECT_EQ(p.grid().patches(), m["num_patches"].get<int64_t>());
    EXPECT_EQ(p.num_tokens(), m["num_tokens"].get<int64_t>());
    testing::Diff d;
    d.add(p.pixel_values, fx.f32(cat("img", i, ".pixel_values")));
    EXPECT_LE(d.max_abs, fx.meta["tolerances"]["pixel_values"]["max_abs"].get<double>());
    std::printf("[ pixels ] image %d: max_abs %.3g\n", i, d.max_abs);
  }
}

TEST(Preprocess, ChessboardUnderTransparentPixels) {
  MediaProcConfig cfg;
  Image clear(20, 20, 4);  // all zero: fully transparent black
  Image out = composite_on_chessboard(clear, cfg);
  ASSERT_EQ(out.channels, 3);
  for (int y = 0; y < 20; ++y)
    for (int x = 0; x < 20; ++x) {
      const int want = (x / 8 + y / 8) % 2 == 1 ? 180 : 255;
      ASSERT_EQ(out.at(x, y)[0], want) << x << "," << y;
      ASSERT_EQ(out.at(x, y)[2], want);
    }
  cfg.chessboard_white_on_top_left = false;
  EXPECT_EQ(composite_on_chessboard(clear, cfg).at(0, 0)[1], 180);
  // Opaque pixels keep their colour; half alpha truncates a*rgb + (1-a)*bg.
  Image px(1, 1, 4);
  px.pixels = {10, 200, 90, 255};
  EXPECT_EQ(composite_on_chessboard(px, cfg).pixels, (std::vector<uint8_t>{10, 200, 90}));
  px.pixels = {0, 100, 255, 128};
  const float a = 128.0f / 255.0f;
  EXPECT_EQ(composite_on_chessboard(px, cfg).pixels[1], static_cast<uint8_t>(a * 100 + (1 - a) * 180));
}

TEST(Preprocess, ResizeKeepsSizeAndConstantImages) {
  Image img(37, 23, 3);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(i * 7);
  EXPECT_EQ(pil_resize_bicubic(img, 37, 23).pixels, img.pixels);
  // Normalised weights: a constant image stays constant under any resize.  With alpha the
  // colour goes through PIL's premultiplication: 77 at alpha 200 is stored as 60 and comes back
  // as 255 * 60 / 200 = 76 (a straight-alpha resize would keep 77).
  Image flat(50, 31, 4);
  for (size_t i = 0; i < flat.pixels.size(); ++i) flat.pixels[i] = (i % 4 == 3) ? 200 : 77;
  Image flat_rgb(50, 31, 3);
  std::fill(flat_rgb.pixels.begin(), flat_rgb.pixels.end(), 77);
  for (auto [w, h] : {std::pair{13, 7}, std::pair{91, 40}, std::pair{50, 5}, std::pair{1, 1}}) {
    const Image r = pil_resize_bicubic(flat, w, h);
    ASSERT_EQ(r.width, w);
    ASSERT_EQ(r.height, h);
    for (size_t i = 0; i < r.pixels.size(); ++i) ASSERT_EQ(r.pixels[i], (i % 4 == 3) ? 200 : 76) << w << "x" << h;
    for (uint8_t v : pil_resize_bicubic(flat_rgb, w, h).pixels) ASSERT_EQ(v, 77) << w << "x" << h;
  }
}

TEST(MediaConfig, DefaultsAndErrors) {
  testing::TempDir tmp;
  const MediaProcConfig d = load_media_proc_config(tmp.path());  // no file: released defaults
  EXPECT_EQ(d.in_patch_limit, 65536);
  EXPECT_EQ(d.patch_limit_on_one_side, 512);
  EXPECT_EQ(d.chessboard_gray_value, 180);
  try {
    parse_media_proc_config(R"({"media_proc_cfg": {"in_patch_limit": -3, "image_std": [0.5, 0.5],
        "transparent_bg_config": {"pattern": "stripes"}, "transparent_bg_fill_stage": "never",
        "fixed_output_tokens": 64}})",
                            "pp.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const char* field :
         {"media_proc_cfg.in_patch_limit", "media_proc_cfg.image_std", "media_proc_cfg.transparent_bg_config.pattern",
          "media_proc_cfg.transparent_bg_fill_stage", "media_proc_cfg.fixed_output_tokens", "pp.json"})
      EXPECT_NE(m.find(field), std::string::npos) << field << " not in: " << m;
  }
}

// Numbers that parsed but broke the preprocessing: patch_limit_on_one_side * patch_size
// overflowed int ("resize to an empty size -2147483648x-2147483648"); a std that rounds to 0 in
// float32 or a mean beyond float range made every pixel inf and the embeddings NaN.
TEST(MediaConfig, OutOfRangeNumbersAreErrors) {
  const auto error = [](const std::string& json) {
    return testing::error_message([&] { parse_media_proc_config(json, "pp.json"); });
  };
  std::string m = error(R"({"patch_limit_on_one_side": 1073741824})");
  EXPECT_NE(m.find("pp.json: invalid media_proc_cfg"), std::string::npos) << m;
  EXPECT_NE(m.find("patch_limit_on_one_side: must be an integer in [1, 65536], got 1073741824"), std::string::npos)
      << m;
  m = error(R"({"image_std": [1e-50, 0.5, 0.5]})");
  EXPECT_NE(m.find("image_std: entries must be positive, and large enough"), std::string::npos) << m;
  m = error(R"({"image_std": [1e-40, 0.5, 0.5]})");  // a float32 denormal: 1 / 1e-40 overflows
  EXPECT_NE(m.find("image_std: entries must be positive, and large enough"), std::string::npos) << m;
  m = error(R"({"image_std": [1e300, 0.5, 0.5]})");
  EXPECT_NE(m.find("image_std: entries must be positive"), std::string::npos) << m;
  m = error(R"({"image_mean": [1e39, 0.5, 0.5]})");
  EXPECT_NE(m.find("image_mean: entries must be finite float32 numbers"), std::string::npos) << m;
  // Unusual but finite settings still parse.
  const MediaProcConfig c = parse_media_proc_config(R"({"image_mean": [-3, 0, 2], "image_std": [1e-3, 100, 0.01],
      "patch_limit_on_one_side": 65536})",
                                                    "pp.json");
  EXPECT_EQ(c.patch_limit_on_one_side, 65536);
  EXPECT_FLOAT_EQ(c.image_std[0], 1e-3f);
}

}  // namespace
}  // namespace k3
