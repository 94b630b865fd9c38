// The synthetic checkpoint writer: official layout (with the tiny vision tower), determinism,
// overrides, refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "model/k3_model.h"
#include "support/test_support.h"
#include "synth/synth_checkpoint.h"
#include "vision/vision_model.h"

namespace k3 {
namespace {

TEST(Synth, TinyIsAValidOfficialLayoutCheckpoint) {
  testing::TempDir tmp;
  write_synth_checkpoint(tmp.path(), SynthOptions{});
  auto cfg = nlohmann::json::parse(testing::read_file(tmp.file("config.json")));
  EXPECT_EQ(cfg["model_type"], "kimi_k3");
  EXPECT_EQ(cfg["text_config"]["model_type"], "kimi_linear");
  auto index = nlohmann::json::parse(testing::read_file(tmp.file("model.safetensors.index.json")));
  EXPECT_EQ(index["weight_map"]["language_model.lm_head.weight"], "model-00002-of-000002.safetensors");
  auto m = Model::load(tmp.path());
  EXPECT_EQ(m->config().schedule_string(), "KKKMKKKMM");
  const TextConfig& c = m->text();
  // Every tensor belongs to one of the two loaders: the text model leaves only the vision
  // tower's, and the vision loader binds all of those (it rejects any it would ignore).
  EXPECT_TRUE(m->config().has_vision);
  ASSERT_FALSE(m->weights().unused_tensors.empty());
  for (const std::string& name : m->weights().unused_tensors)
    EXPECT_TRUE(name.starts_with("vision_tower.") || name.starts_with("mm_projector.")) << name;
  auto vision = VisionModel::load(tmp.path());
  EXPECT_EQ(vision->text_hidden_size(), c.hidden_size);
  EXPECT_EQ(vision->config().num_layers, 3);
  EXPECT_EQ(m->weights().layers[1].moe_w.experts[3].down.format, WeightFormat::kMxfp4);
  EXPECT_EQ(m->weights().layers[0].kda.o.format, WeightFormat::kBF16);
  EXPECT_EQ(c.vocab_size, 2048);
  EXPECT_EQ(m->config().stop_token_ids, std::vector<int>{2048 - 254});
  // Release dtypes: fp32 gate parameters and conv taps.
  Checkpoint ck(tmp.path());
  EXPECT_EQ(ck.find("language_model.model.layers.0.self_attn.A_log")->dtype, DType::kF32);
  EXPECT_EQ(ck.find("language_model.model.layers.0.self_attn.A_log")->shape, std::vector<int64_t>{64});
  EXPECT_EQ(ck.find("language_model.model.layers.0.self_attn.q_conv1d.weight")->shape, (std::vector<int64_t>{256, 1, 4}));
  EXPECT_EQ(ck.find("language_model.model.layers.2.block_sparse_moe.gate.e_score_correction_bias")->dtype, DType::kF32);
}

TEST(Synth, NoVisionAndPresetDefaults) {
  testing::TempDir tmp;
  SynthOptions o;
  o.vision = "none";
  o.overrides = {{"num_hidden_layers", 2}, {"vocab_size", 512}};
  write_synth_checkpoint(tmp.path(), o);
  auto m = Model::load(tmp.path());
  EXPECT_FALSE(m->config().has_vision);
  EXPECT_TRUE(m->weights().unused_tensors.empty());
  EXPECT_FALSE(file_exists(tmp.file("model-vision.safetensors")));
  EXPECT_THROW(VisionModel::load(tmp.path()), Error);

  EXPECT_EQ(synth_vision_preset(SynthOptions{}), "tiny");
  SynthOptions wide;
  wide.preset = "k3-width";
  EXPECT_EQ(synth_vision_preset(wide), "");  // a released-width tower only on request
  wide.vision = "k3";
  EXPECT_EQ(synth_vision_preset(wide), "k3");
  wide.vision = "huge";
  EXPECT_THROW(synth_vision_preset(wide), Error);
}

TEST(Synth, DeterministicAndSeedDependent) {
  testing::TempDir a, b, c;
  SynthOptions o;
  o.overrides = {{"num_hidden_layers", 2}, {"vocab_size", 512}};
  write_synth_checkpoint(a.path(), o);
  write_synth_checkpoint(b.path(), o);
  o.seed = 99;
  write_synth_checkpoint(c.path(), o);
  for (const std::string shard : {"/model-00001-of-000002.safetensors", "/model-vision.safetensors"}) {
    EXPECT_EQ(testing::read_file(a.path() + shard), testing::read_file(b.path() + shard)) << shard;
    EXPECT_NE(testing::read_file(a.path() + shard), testing::read_file(c.path() + shard)) << shard;
  }
}

TEST(Synth, OverridesShapeTheModel) {
  testing::TempDir tmp;
  SynthOptions o;
  o.overrides = {{"num_hidden_layers", 5}, {"num_experts", 8}, {"num_experts_per_token", 2}, {"hidden_size", 64},
                 {"vocab_size", 600}};
  o.shards = 3;
  write_synth_checkpoint(tmp.path(), o);
  auto m = Model::load(tmp.path());
  EXPECT_EQ(m->config().schedule_string(), "KKKMM");
  EXPECT_EQ(m->text().num_experts, 8);
  EXPECT_EQ(m->text().hidden_size, 64);
  Checkpoint ck(tmp.path());
  EXPECT_EQ(ck.shard_count(), 4u);  // 3 text shards + model-vision.safetensors
}

TEST(Synth, RefusesBadSettings) {
  testing::TempDir tmp;
  SynthOptions o;
  o.overrides = {{"no_such_setting", 3}};
  EXPECT_THROW(write_synth_checkpoint(tmp.path(), o), Error);
  o.overrides = {{"num_experts_per_token", 100}};
  EXPECT_THROW(write_synth_checkpoint(tmp.path(), o), Error);
  o.overrides = {{"hidden_size", -4}};
  EXPECT_THROW(write_synth_checkpoint(tmp.path(), o), Error);
  o = SynthOptions{};
  o.preset = "huge";
  EXPECT_THROW(write_synth_checkpoint(tmp.path(), o), Error);
  EXPECT_NE(synth_config(SynthOptions{})["text_config"].dump().find("kimi_linear"), std::string::npos);
}

// --out with missing parent folders creates them (mkdir -p); a path under a file cannot be made
// and says so.
TEST(Synth, CreatesParentFoldersAndNamesAnUncreatableOne) {
  testing::TempDir tmp;
  SynthOptions o;
  o.vision = "none";
  o.overrides = {{"num_hidden_layers", 2}, {"vocab_size", 512}};
  const std::string deep = tmp.path() + "/a/b/model";
  write_synth_checkpoint(deep, o);
  EXPECT_TRUE(std::filesystem::exists(deep + "/config.json"));
  std::ofstream(tmp.path() + "/plain") << "x";
  try {
    write_synth_checkpoint(tmp.path() + "/plain/model", o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create directory"), std::string::npos) << e.what();
  }
}

// A writer stopped part-way (a full disk, a kill; here the vision shard's name is taken by a
// folder, so the last shard fails) leaves no config.json, so the folder never loads as a
// checkpoint -- not even over an earlier, complete one, whose config.json goes first.
TEST(Synth, StoppedPartWayLeavesNothingThatLoads) {
  testing::TempDir tmp;
  SynthOptions o;
  o.overrides = {{"num_hidden_layers", 2}, {"vocab_size", 512}};
  write_synth_checkpoint(tmp.path(), o);
  ASSERT_NO_THROW(Model::load(tmp.path()));
  std::filesystem::remove(tmp.file("model-vision.safetensors"));
  std::filesystem::create_directory(tmp.file("model-vision.safetensors"));
  EXPECT_THROW(write_synth_checkpoint(tmp.path(), o), Error);
  EXPECT_FALSE(std::filesystem::exists(tmp.file("config.json")));
  try {
    Model::load(tmp.path());
    FAIL() << "a half-written checkpoint loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace k3
