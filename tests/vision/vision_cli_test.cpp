// `k3 vision-embed` against vision-tiny-a: all four images packed in one run give the golden
// pixel_values, grid_thw and batch projector output; a bad image is a clean error.
// `k3 generate --image` on a synthesized default-style model (tiny preset, vision included):
// text and raw-id prompts with images generate; bad images, models without a vision tower and
// prompts over the context are clean errors naming the problem.
#include <gtest/gtest.h>

#include "base/error.h"
#include "support/test_support.h"
#include "image_writers.h"
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

class GenerateImageCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    for (const char* extra : {"", " --no-vision"}) {
      const std::string out = dir_->file(*extra ? "text" : "model");
      const testing::CommandResult r =
          testing::run_k3("synth --preset tiny --layers 2 --experts 4 --top-k 2" + std::string(extra) + " --out " + out);
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    testing::PngSpec png;
    png.width = 84;
    png.height = 56;
    for (int i = 0; i < 84 * 56 * 3; ++i) png.samples.push_back(static_cast<uint16_t>((i * 37) % 256));
    const testing::Bytes bytes = testing::encode_png(png);
    testing::write_file(dir_->file("a.png"), std::string(bytes.begin(), bytes.end()));
    std::vector<uint8_t> rgb(40 * 30 * 3);
    for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 11);
    const testing::Bytes jpg = testing::encode_jpeg(40, 30, rgb, 6);
    testing::write_file(dir_->file("b.jpg"), std::string(jpg.begin(), jpg.end()));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string model() { return dir_->file("model"); }
  static testing::TempDir* dir_;
};
testing::TempDir* GenerateImageCli::dir_ = nullptr;

size_t count_ids(const std::string& out) {
  size_t n = 0;
  bool in = false;
  for (char c : out) {
    const bool digit = c >= '0' && c <= '9';
    if (digit && !in) ++n;
    in = digit;
  }
  return n;
}

TEST_F(GenerateImageCli, TextPromptWithImagesGenerates) {
  const testing::CommandResult r =
      testing::run_k3("generate --model " + model() + " --image " + dir_->file("a.png") + " --image " +
                      dir_->file("b.jpg") + " --prompt 'What is shown?' --max-tokens 4 --ignore-eos --print-ids");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_ids(r.out), 4u) << r.out;
  // The images change the continuation's inputs: the same text without them is another prompt.
  const testing::CommandResult ids =
      testing::run_k3("generate --model " + model() + " --image " + dir_->file("a.png") +
                      " --prompt-ids 5,6,7 --max-tokens 2 --ignore-eos");
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  EXPECT_EQ(count_ids(ids.out), 2u) << ids.out;
}

// `/image PATH` in k3 chat attaches the image to the next message; a bad file is reported and
// the chat goes on.
TEST_F(GenerateImageCli, ChatImageCommand) {
  testing::write_file(dir_->file("bad2.png"), "\x89PNG\r\n\x1a\n garbage");
  const testing::CommandResult r = testing::run_k3(
      "chat --model " + model() + " --no-think --max-tokens 2",
      "/image " + dir_->file("a.png") + "\nWhat is this?\n/image " + dir_->file("bad2.png") + "\nAgain?\n/quit\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("(attached " + dir_->file("a.png") + ": 84x56, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(error: " + dir_->file("bad2.png") + ": invalid PNG"), std::string::npos) << r.out;
  const testing::CommandResult text_only =
      testing::run_k3("chat --model " + dir_->file("text") + " --max-tokens 1", "/image " + dir_->file("a.png") + "\n");
  EXPECT_EQ(text_only.exit_code, 0) << text_only.err;
  EXPECT_NE(text_only.out.find("has no vision tower"), std::string::npos) << text_only.out;
}

TEST_F(GenerateImageCli, CleanErrors) {
  testing::write_file(dir_->file("bad.png"), "\x89PNG\r\n\x1a\n garbage");
  testing::write_file(dir_->file("empty.jpg"), "");
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"--model " + model() + " --image " + dir_->file("bad.png") + " --prompt hi", dir_->file("bad.png") + ": invalid PNG"},
      {"--model " + model() + " --image " + dir_->file("empty.jpg") + " --prompt hi", dir_->file("empty.jpg")},
      {"--model " + model() + " --image " + dir_->file("missing.png") + " --prompt hi", dir_->file("missing.png")},
      {"--model " + dir_->file("text") + " --image " + dir_->file("a.png") + " --prompt hi", "has no vision tower"},
      {"--model " + model() + " --image " + dir_->file("a.png") + " --prompt hi --ctx 8", "image(s)) but the context holds 8"},
  };
  for (const Case& c : cases) {
    const testing::CommandResult r = testing::run_k3("generate " + c.args + " --max-tokens 1");
    EXPECT_EQ(r.exit_code, 1) << c.args;
    EXPECT_NE(r.err.find("k3: error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
}

}  // namespace
}  // namespace k3
