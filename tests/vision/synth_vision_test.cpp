// The synthetic vision tower: added to a synthetic text checkpoint, it loads as a VisionModel,
// the text model still loads, images encode to text-width rows that drive the LM through the
// embedding overrides, and it is deterministic per seed.
#include "vision/synth_vision.h"

#include <gtest/gtest.h>

#include <cmath>

#include "io/safetensors_writer.h"
#include "model/k3_model.h"
#include "support/test_support.h"
#include "synth/synth_checkpoint.h"
#include "vision/media_prompt.h"
#include "vision/vision_model.h"

namespace k3 {
namespace {

Image gradient(int w, int h, int channels) {
  Image img(w, h, channels);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c) img.at(x, y)[c] = static_cast<uint8_t>((x * 3 + y * 5 + c * 60) % 256);
  return img;
}

TEST(SynthVision, AddsALoadableTowerToATextCheckpoint) {
  testing::TempDir tmp;
  SynthOptions text_only;
  text_only.vision = "none";
  write_synth_checkpoint(tmp.path(), text_only);
  auto text = Model::load(tmp.path());
  const int hidden = text->text().hidden_size;
  add_synth_vision(tmp.path(), hidden, 7);

  auto model = Model::load(tmp.path());  // the text model still loads
  EXPECT_TRUE(model->config().has_vision);
  EXPECT_FALSE(model->weights().unused_tensors.empty());  // the vision tensors, unused by the LM
  auto vision = VisionModel::load(tmp.path());
  EXPECT_EQ(vision->text_hidden_size(), hidden);
  EXPECT_EQ(vision->config().num_layers, 3);
  EXPECT_EQ(vision->media_config().in_patch_limit, 65536);
  EXPECT_EQ(vision->weights().blocks[0].wqkv.format, WeightFormat::kBF16);

  const std::vector<Image> images = {gradient(61, 30, 3), gradient(40, 57, 4)};
  const PreprocessedImage a = vision->preprocess(images[0]);
  const PreprocessedImage b = vision->preprocess(images[1]);
  const std::vector<PreprocessedImage> both = {a, b};
  const std::vector<float> rows = vision->encode(both);
  ASSERT_EQ(static_cast<int64_t>(rows.size()), (a.num_tokens() + b.num_tokens()) * hidden);
  const EncodedImages e = vision->encode_images(images);
  ASSERT_EQ(e.prompts.size(), 2u);
  EXPECT_EQ(e.prompts[0].text, image_media_prompt(61, 30, a.num_tokens()).text);
  EXPECT_EQ(e.prompts[1].num_pads, b.num_tokens());
  EXPECT_EQ(e.rows, rows);
  double sumsq = 0;
  for (float v : rows) {
    ASSERT_TRUE(std::isfinite(v));
    sumsq += static_cast<double>(v) * v;
  }
  // post_norm: each row has RMS near the norm gain (~1).
  EXPECT_NEAR(std::sqrt(sumsq / rows.size()), 1.0, 0.3);

  // The rows feed the language model through the <|media_pad|> overrides.
  const int32_t pad = model->config().media_placeholder_token_id;
  std::vector<int32_t> tokens = {5, 6};
  tokens.insert(tokens.end(), a.num_tokens(), pad);
  tokens.push_back(7);
  const std::vector<float> rows_a = vision->encode({&a, 1});
  const std::vector<EmbeddingOverride> o = media_embedding_overrides(tokens, pad, rows_a, hidden);
  std::vector<float> with, without;
  SequenceState s1 = model->new_sequence(), s2 = model->new_sequence();
  const SequenceInput in1{&s1, tokens, false, o};
  const SequenceInput in2{&s2, tokens, false, {}};
  model->forward({&in1, 1}, &with);
  model->forward({&in2, 1}, &without);
  ASSERT_EQ(with.size(), without.size());
  EXPECT_NE(with, without);
}

TEST(SynthVision, DeterministicPerSeed) {
  testing::TempDir a, b, c;
  for (const auto* d : {&a, &b, &c}) testing::write_file(d->file("config.json"), R"({"model_type": "kimi_k3"})");
  for (const auto* d : {&a, &b, &c}) {
    SafetensorsWriter w;  // a one-tensor "text" file to extend
    w.add_f32("language_model.model.norm.weight", {4}, {1, 1, 1, 1});
    w.write(d->file("model.safetensors"));
  }
  SynthVisionOptions o;
  o.num_layers = 1;
  add_synth_vision(a.path(), 64, o);
  add_synth_vision(b.path(), 64, o);
  o.seed = 99;
  add_synth_vision(c.path(), 64, o);
  const std::string shard = "model-vision.safetensors";
  EXPECT_EQ(testing::read_file(a.file(shard)), testing::read_file(b.file(shard)));
  EXPECT_NE(testing::read_file(a.file(shard)), testing::read_file(c.file(shard)));
  // The single-file checkpoint got an index covering both files.
  auto index = nlohmann::json::parse(testing::read_file(a.file("model.safetensors.index.json")));
  EXPECT_EQ(index["weight_map"]["language_model.model.norm.weight"], "model.safetensors");
  EXPECT_EQ(index["weight_map"]["mm_projector.post_norm.weight"], shard);
  EXPECT_EQ(VisionModel::load(a.path())->config().num_layers, 1);
}

}  // namespace
}  // namespace k3
