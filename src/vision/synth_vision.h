// Adds a random MoonViT-V2 tower and patchmergerv2 projector to a synthetic K3 checkpoint
// directory (one written by write_synth_checkpoint, or any official-layout directory), so image
// input works on synthetic models:
//   - model-vision.safetensors with the vision_tower.* / mm_projector.* tensors in BF16 (as
//     released), deterministic from the seed, at realistic scales (linear layers ~ 1/sqrt(fan_in),
//     norm gains near 1);
//   - those tensors added to model.safetensors.index.json (created from model.safetensors when
//     the directory is not sharded);
//   - `vision_config` (official keys) added to config.json;
//   - preprocessor_config.json with the released media_proc_cfg.
// Presets: "tiny" (width 128, 3 blocks, 4 heads of 48 -- the built-in default model) and "k3"
// (the released widths: 1024, 27 blocks, 12 heads of 128, MLP 4096).
// `sparse`: every tensor is zeros, left as a file hole (io/safetensors_writer.h), nothing random
// generated: the layout at its true size for a few KB of disk.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors_writer.h"

namespace k3 {

struct SynthVisionOptions {
  std::string preset = "tiny";
  int num_layers = -1;  // override the preset's block count when >= 0
  uint64_t seed = 0x6b33;
  bool sparse = false;  // zero tensors as file holes, no random data
};

struct VisionConfig;

// Declares every vision_tower.* / mm_projector.* tensor of the config, in a fixed order, to
// `emit` (a SafetensorsWriter::add, or a caller spreading them over shards); the fills are
// empty when options.sparse.
using SynthTensorSink =
    std::function<void(const std::string& name, DType dtype, std::vector<int64_t> shape, SafetensorsWriter::Fill fill)>;
void plan_synth_vision_tensors(const VisionConfig& c, const SynthVisionOptions& options, const SynthTensorSink& emit);

// The vision_config object a preset describes, projecting to text_hidden.
nlohmann::json synth_vision_config(const SynthVisionOptions& options, int text_hidden);

// The released media_proc_cfg as preprocessor_config.json content.
nlohmann::json released_preprocessor_config();

// Writes the tower's shard and preprocessor_config.json into dir and adds its tensors to the
// index; config.json (which must gain `c`'s vision_config) is left to the caller, to write last.
void write_synth_vision_files(const std::string& dir, const VisionConfig& c, const SynthVisionOptions& options);

void add_synth_vision(const std::string& dir, int text_hidden, const SynthVisionOptions& options);
void add_synth_vision(const std::string& dir, int text_hidden, uint64_t seed);

}  // namespace k3
