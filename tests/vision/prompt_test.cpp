// Prompt framing against golden.json and the embedding-override helper.
#include <gtest/gtest.h>

#include "base/error.h"
#include "vision/media_prompt.h"
#include "vision_fixture.h"

namespace k3 {
namespace {

TEST(MediaPrompt, MatchesGoldenFraming) {
  const testing::VisionFixture fx;
  for (int i = 0; i < fx.images(); ++i) {
    const auto& m = fx.image(i);
    const MediaPrompt p = image_media_prompt(m["width"], m["height"], m["num_tokens"].get<int64_t>());
    EXPECT_EQ(p.text, m["prompt_expanded"].get<std::string>());
    EXPECT_EQ(p.num_pads, m["num_tokens"].get<int64_t>());
  }
  EXPECT_THROW(image_media_prompt(10, 10, 0), Error);
}

TEST(MediaPrompt, OverridesPadsInOrder) {
  const int32_t pad = 163605;
  const std::vector<int32_t> tokens = {1, pad, pad, 7, 8, pad, 9};
  const int64_t hidden = 2;
  const std::vector<float> rows = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f};
  const std::vector<EmbeddingOverride> o = media_embedding_overrides(tokens, pad, rows, hidden);
  ASSERT_EQ(o.size(), 3u);
  EXPECT_EQ(o[0].index, 1);
  EXPECT_EQ(o[1].index, 2);
  EXPECT_EQ(o[2].index, 5);
  EXPECT_EQ(o[0].values, rows.data());
  EXPECT_EQ(o[1].values, rows.data() + 2);
  EXPECT_EQ(o[2].values, rows.data() + 4);

  try {
    media_embedding_overrides(tokens, pad, std::span<const float>(rows).first(4), hidden);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 image pad tokens (id 163605) but the images encode to 2 rows"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(media_embedding_overrides(tokens, pad, std::span<const float>(rows).first(5), hidden), Error);
}

}  // namespace
}  // namespace k3
