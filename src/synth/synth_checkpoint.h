// Writes synthetic Kimi K3 checkpoints in the official layout (config.json with a kimi_k3
// top level and kimi_linear text_config, sharded safetensors + index, BF16 trunk, F32 gate
// parameters, MXFP4 routed experts) from deterministic random weights at realistic scales.
// Presets: "tiny" (the built-in default model), "k3-width" (full Kimi K3 widths with few layers
// and experts, for benchmarks) and "k3" (the released text config exactly: 93 layers, 896
// experts, with the released-width vision tower: 497,220 tensors, 1,560,860,324,864 bytes, in 96
// shards); any text_config key can be overridden.
// `sparse`: every tensor is zeros left as a file hole, nothing random generated; headers, index,
// config.json and tokenizer are real, so the release's layout costs ~100-150 MB of disk.
// Sharding: with at most layers + 1 shards, each shard holds whole layers and a vision tower has
// its own model-vision.safetensors; with more (preset k3: 96 by default), tensors are spread in
// declaration order, vision tower included, to about total/shards bytes each, never splitting
// one routed expert's six tensors.
// The tiny preset also gets a MoonViT-V2 vision tower and projector (vision/synth_vision.h, its
// "tiny" tower: ~2 MB) so image input works on the default model; k3-width gets none by default
// (a released-width tower is ~0.9 GB and encodes slowly on a CPU) unless vision = "k3".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace k3 {

struct SynthOptions {
  std::string preset = "tiny";
  nlohmann::json overrides = nlohmann::json::object();  // text_config keys (layers, widths ...)
  uint64_t seed = 0x6b33;                               // "k3"
  int shards = 0;                                       // 0 = choose from the size
  // Vision tower: "default" (tiny preset: the tiny tower; k3-width: none), "none", or a
  // synth_vision preset ("tiny", "k3").
  std::string vision = "default";
  bool sparse = false;  // all tensors are file holes (zeros), no random data
};

// The vision preset the options resolve to ("" = no vision tower).
std::string synth_vision_preset(const SynthOptions& options);

// The full config.json the options describe (validated by the same parser k3 loads with).
nlohmann::json synth_config(const SynthOptions& options);

// Names of the presets.
std::vector<std::string> synth_presets();

// Writes the checkpoint into dir (created if missing); each file is written to a temporary and
// renamed into place.  Throws k3::Error.
void write_synth_checkpoint(const std::string& dir, const SynthOptions& options);

}  // namespace k3
