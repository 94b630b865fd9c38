// `k3 synth --sparse`: tensors as file holes, and the released Kimi K3 layout (preset k3) at its
// true size: 96 shards, 497,220 tensors, 1,560,860,324,864 bytes, ~100-150 MB of disk.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/k3_config.h"
#include "model/k3_model.h"
#include "support/test_support.h"
#include "synth/synth_checkpoint.h"
#include "text/tokenizer.h"
#include "vision/vision_config.h"

namespace k3 {
namespace {

namespace fs = std::filesystem;

// Bytes the file system allocated to a file.
uint64_t disk_bytes(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

uint64_t dir_disk_bytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir)) total += disk_bytes(e.path().string());
  return total;
}

TEST(SparseWriter, TensorsWithoutAFillAreHolesOfZeros) {
  testing::TempDir tmp;
  SafetensorsWriter w;
  w.add("big", DType::kBF16, {4096, 4096}, nullptr);  // 32 MiB of zeros
  w.add_f32("small", {4}, {1.0f, 2.0f, 3.0f, 4.0f});
  w.add("tail", DType::kU8, {1 << 20}, nullptr);  // a trailing hole: the size must still be right
  const std::string path = tmp.file("h.safetensors");
  w.write(path);
  const SafetensorsFile f(path);
  const TensorView* big = f.find("big");
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->nbytes, 32u << 20);
  EXPECT_EQ(fs::file_size(path), f.find("tail")->offset + (1u << 20));  // a file offset
  for (size_t i = 0; i < big->nbytes; i += 4093) ASSERT_EQ(big->data[i], 0) << i;
  EXPECT_EQ(f.find("tail")->data[(1 << 20) - 1], 0);
  const auto* small = reinterpret_cast<const float*>(f.find("small")->data);
  EXPECT_EQ(small[3], 4.0f);
  EXPECT_LT(disk_bytes(path), 1u << 20) << "the zeros took disk blocks";
  // No temporary left beside it.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(tmp.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);
}

// More shards than layers + 1: tensors spread by size, the vision tower inside the shards, no
// routed expert split, each expert's six tensors adjacent; the sparse model loads.
TEST(SparseSynth, ManyShardsSpreadBySizeWithoutSplittingAnExpert) {
  testing::TempDir tmp;
  SynthOptions o;
  o.sparse = true;
  o.overrides = {{"num_hidden_layers", 3}};
  o.shards = 12;
  write_synth_checkpoint(tmp.path(), o);
  EXPECT_FALSE(fs::exists(tmp.file("model-vision.safetensors")));
  const auto index = nlohmann::json::parse(testing::read_file(tmp.file("model.safetensors.index.json")));
  std::set<std::string> files;
  for (const auto& [name, file] : index["weight_map"].items()) files.insert(file.get<std::string>());
  ASSERT_EQ(files.size(), 12u);
  EXPECT_TRUE(files.contains("model-00012-of-000012.safetensors"));
  EXPECT_EQ(index["weight_map"]["mm_projector.post_norm.weight"], "model-00012-of-000012.safetensors");
  const std::string e = "language_model.model.layers.1.block_sparse_moe.experts.5.";
  const std::string shard = index["weight_map"][e + "w1.weight_packed"];
  for (const char* t : {"w1.weight_scale", "w3.weight_packed", "w3.weight_scale", "w2.weight_packed", "w2.weight_scale"})
    EXPECT_EQ(index["weight_map"][e + t], shard) << t;
  const SafetensorsFile f(tmp.file(shard));
  uint64_t end = f.find(e + "w1.weight_packed")->offset;
  for (const char* t : {"w1.weight_packed", "w1.weight_scale", "w3.weight_packed", "w3.weight_scale",
                        "w2.weight_packed", "w2.weight_scale"}) {
    EXPECT_EQ(f.find(e + t)->offset, end) << t;  // in declaration order, back to back
    end += f.find(e + t)->nbytes;
  }
  const ModelConfig mc = load_model_config(tmp.path());
  EXPECT_TRUE(mc.has_vision);
  EXPECT_EQ(parse_vision_config(nlohmann::json::parse(testing::read_file(tmp.file("config.json"))), "config.json")
                .num_layers,
            3);
  auto m = Model::load(tmp.path());
  EXPECT_EQ(m->config().schedule_string(), "KKM");
}

TEST(SparseSynth, RefusesMoreShardsThanTensors) {
  testing::TempDir tmp;
  SynthOptions o;
  o.sparse = true;
  o.overrides = {{"num_hidden_layers", 2}};
  o.shards = 100000;
  try {
    write_synth_checkpoint(tmp.file("m"), o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--shards 100000: the checkpoint has only"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(tmp.file("m")));  // refused before anything was created
}

TEST(SparseSynth, K3PresetScheduleIsTheReleasedOne) {
  SynthOptions o;
  o.preset = "k3";
  const nlohmann::json cfg = synth_config(o);
  const nlohmann::json& lin = cfg["text_config"]["linear_attn_config"];
  std::vector<int> full, kda;
  for (int i = 4; i <= 92; i += 4) full.push_back(i);
  full.push_back(93);
  for (int i = 1; i <= 91; ++i)
    if (i % 4 != 0) kda.push_back(i);
  EXPECT_EQ(lin["full_attn_layers"].get<std::vector<int>>(), full);
  EXPECT_EQ(lin["kda_layers"].get<std::vector<int>>(), kda);
  EXPECT_EQ(full.size(), 24u);
  EXPECT_EQ(kda.size(), 69u);
  EXPECT_EQ(synth_vision_preset(o), "k3");
}

// The released layout, in full.
TEST(SparseSynth, K3PresetIsTheReleasedLayout) {
  testing::TempDir tmp;
  SynthOptions o;
  o.preset = "k3";
  o.sparse = true;
  const auto t0 = std::chrono::steady_clock::now();
  write_synth_checkpoint(tmp.path(), o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t disk = dir_disk_bytes(tmp.path());
  std::printf("sparse k3 layout: written in %.2f s, %.1f MB on disk\n", seconds, disk / 1e6);
  EXPECT_LT(disk, 200'000'000u);

  const auto index = nlohmann::json::parse(testing::read_file(tmp.file("model.safetensors.index.json")));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), 1'560'860'324'864u);
  const auto& wm = index["weight_map"];
  EXPECT_EQ(wm.size(), 497'220u);

  // Every shard parses (mmap), every tensor is where the index says; the totals are the release's.
  size_t shards = 0, tensors = 0;
  uint64_t bytes = 0, max_shard = 0;
  std::map<std::string, std::pair<std::string, uint64_t>> where;  // expert prefix -> (file, first offset)
  for (int s = 1; s <= 96; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-000096.safetensors", s);
    ASSERT_TRUE(fs::exists(tmp.file(name))) << name;
    const SafetensorsFile f(tmp.file(name), Residency::kMapped);
    ++shards;
    uint64_t shard_bytes = 0;
    for (const auto& [tname, view] : f.tensors()) {
      ++tensors;
      shard_bytes += view.nbytes;
      ASSERT_EQ(wm.at(tname), name) << tname;
    }
    bytes += shard_bytes;
    max_shard = std::max(max_shard, shard_bytes);
    // Each routed expert's six tensors: one contiguous run in this file.
    std::map<std::string, std::pair<uint64_t, uint64_t>> span;  // prefix -> (begin, bytes)
    for (const auto& [tname, view] : f.tensors()) {
      const size_t at = tname.find(".experts.");
      if (at == std::string::npos) continue;
      const std::string prefix = tname.substr(0, tname.find('.', at + 9));
      auto [it, fresh] = span.try_emplace(prefix, view.offset, 0);
      it->second.first = std::min(it->second.first, view.offset);
      it->second.second += view.nbytes;
      (void)fresh;
    }
    for (const auto& [prefix, sb] : span) {
      ASSERT_EQ(sb.second, 2 * (3072 * 1792 + 3072 * 112) + 3584 * 1536 + 3584 * 96) << prefix << " in " << name;
      for (const char* t : {".w1.weight_packed", ".w1.weight_scale", ".w3.weight_packed", ".w3.weight_scale",
                            ".w2.weight_packed", ".w2.weight_scale"}) {
        const TensorView* v = f.find(prefix + t);
        ASSERT_NE(v, nullptr) << prefix << t << " not in " << name;
        ASSERT_LT(v->offset - sb.first, sb.second) << prefix << t;
      }
    }
  }
  EXPECT_FALSE(fs::exists(tmp.file("model-vision.safetensors")));
  EXPECT_EQ(shards, 96u);
  EXPECT_EQ(tensors, 497'220u);
  EXPECT_EQ(bytes, 1'560'860'324'864u);
  EXPECT_LT(max_shard, 1'560'860'324'864u / 96 + 3'000'000'000u);  // about total/96 each

  const ModelConfig mc = load_model_config(tmp.path());
  const TextConfig& c = mc.text;
  EXPECT_EQ(c.num_layers, 93);
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.vocab_size, 163840);
  EXPECT_EQ(c.num_experts, 896);
  EXPECT_EQ(c.top_k, 16);
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  EXPECT_EQ(c.intermediate_size, 33792);
  EXPECT_EQ(c.moe_intermediate_size, 3072);
  EXPECT_EQ(c.latent_size.value_or(0), 3584);
  EXPECT_EQ(c.num_shared_experts, 2);
  std::string schedule;
  for (int i = 0; i < 23; ++i) schedule += "KKKM";
  EXPECT_EQ(mc.schedule_string(), schedule + "M");
  EXPECT_TRUE(mc.has_vision);
  EXPECT_EQ(mc.bos_token_id, 163584);
  EXPECT_EQ(mc.pad_token_id, 163839);
  EXPECT_EQ(mc.stop_token_ids, std::vector<int>{163586});
  EXPECT_EQ(mc.media_placeholder_token_id, 163605);
  const VisionConfig vc =
      parse_vision_config(nlohmann::json::parse(testing::read_file(tmp.file("config.json"))), "config.json");
  EXPECT_EQ(vc.num_layers, 27);
  EXPECT_EQ(vc.hidden_size, 1024);
  EXPECT_TRUE(fs::exists(tmp.file("preprocessor_config.json")));

  // The tokenizer has the release's shape and agrees with the config.
  const Tokenizer tok = Tokenizer::from_model_dir(tmp.path());
  EXPECT_EQ(tok.ranks().end_rank(), 163584);
  EXPECT_EQ(tok.specials().tokens().size(), 256u);
  EXPECT_EQ(tok.vocab_size(), 163840);
  EXPECT_EQ(tok.special_id("[EOS]"), 163585);
  EXPECT_EQ(tok.special_id("<|end_of_msg|>"), 163586);
  EXPECT_NO_THROW(check_tokenizer_against_config(tok, mc));
}

}  // namespace
}  // namespace k3
