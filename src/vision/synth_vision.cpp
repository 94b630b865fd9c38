#include "vision/synth_vision.h"

#include <cmath>

#include "base/error.h"
#include "io/json_document.h"
#include "base/numeric_types.h"
#include "base/rng.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "vision/json_fields.h"
#include "vision/vision_config.h"

namespace k3 {
namespace {

using nlohmann::json;

constexpr const char* kShard = "model-vision.safetensors";

uint64_t tensor_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ULL ^ (seed * 0x9e3779b97f4a7c15ULL);
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ULL;
  return h;
}

// A BF16 tensor of normal(mean, std) draws (zeros left as a hole when sparse).
void add_normal(const SynthTensorSink& emit, const SynthVisionOptions& o, const std::string& name,
                std::vector<int64_t> shape, double std, double mean = 0.0) {
  if (o.sparse) {
    emit(name, DType::kBF16, std::move(shape), nullptr);
    return;
  }
  const uint64_t s = tensor_seed(o.seed, name);
  emit(name, DType::kBF16, std::move(shape), [s, std, mean](uint8_t* dst, size_t n) {
    Rng rng(s);
    auto* p = reinterpret_cast<uint16_t*>(dst);
    for (size_t i = 0; i < n / 2; ++i) p[i] = f32_to_bf16(static_cast<float>(mean + std * rng.normal()));
  });
}

void write_json(const std::string& path, const json& j) { write_file_atomically(path, j.dump(2) + "\n"); }

}  // namespace

json synth_vision_config(const SynthVisionOptions& o, int text_hidden) {
  int hidden, layers, heads, qkv, inter;
  if (o.preset == "tiny") {
    hidden = 128, layers = 3, heads = 4, qkv = 192, inter = 512;
  } else if (o.preset == "k3") {
    hidden = 1024, layers = 27, heads = 12, qkv = 1536, inter = 4096;
  } else {
    fail("synth vision: unknown preset '", o.preset, "' (known: tiny, k3)");
  }
  if (o.num_layers >= 0) layers = o.num_layers;
  K3_CHECK(text_hidden > 0, "synth vision: text_hidden must be positive");
  return {{"patch_size", 14},
          {"init_pos_emb_height", 64},
          {"init_pos_emb_width", 64},
          {"init_pos_emb_time", 4},
          {"pos_emb_type", "divided_fixed"},
          {"pos_emb_interpolation_mode", "bilinear"},
          {"vt_num_attention_heads", heads},
          {"vt_num_hidden_layers", layers},
          {"vt_hidden_size", hidden},
          {"vt_intermediate_size", inter},
          {"qkv_hidden_size", qkv},
          {"merge_kernel_size", {2, 2}},
          {"merge_type", "sd2_tpool"},
          {"mm_projector_type", "patchmergerv2"},
          {"mm_hidden_size", hidden},
          {"text_hidden_size", text_hidden},
          {"projector_hidden_act", "gelu"},
          {"projector_ln_eps", 1e-5},
          {"norm_type", "rmsnorm"},
          {"mlp_type", "mlp2"},
          {"activation_func", "gelu_pytorch_tanh"},
          {"attn_bias", false},
          {"linear_bias", false},
          {"patch_embed_proj_bias", false}};
}

json released_preprocessor_config() {
  return {{"image_processor_type", "KimiK3VisionProcessor"},
          {"media_proc_cfg",
           {{"in_patch_limit", 65536},
            {"patch_size", 14},
            {"image_mean", {0.5, 0.5, 0.5}},
            {"image_std", {0.5, 0.5, 0.5}},
            {"merge_kernel_size", 2},
            {"fixed_output_tokens", nullptr},
            {"patch_limit_on_one_side", 512},
            {"in_patch_limit_each_frame", 16384},
            {"sample_fps", 8.0},
            {"temporal_merge_kernel_size", 4},
            {"transparent_bg_config",
             {{"pattern", "chessboard"},
              {"chessboard_square_size", 8},
              {"chessboard_square_on_top_left", true},
              {"chessboard_white_value", 255},
              {"chessboard_gray_value", 180}}},
            {"transparent_bg_fill_stage", "after_resize"}}}};
}

void plan_synth_vision_tensors(const VisionConfig& c, const SynthVisionOptions& o, const SynthTensorSink& emit) {
  const int64_t D = c.hidden_size, Q = c.qkv_hidden_size, I = c.intermediate_size, p = c.patch_size;
  const int64_t M = 4 * D, T = c.text_hidden_size;
  const auto inv_sqrt = [](int64_t n) { return 1.0 / std::sqrt(static_cast<double>(n)); };
  add_normal(emit, o, "vision_tower.patch_embed.proj.weight", {D, 3, p, p}, inv_sqrt(3 * p * p));
  add_normal(emit, o, "vision_tower.patch_embed.pos_emb.weight", {c.pos_emb_height, c.pos_emb_width, D}, 0.2);
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string b = cat("vision_tower.encoder.blocks.", l, ".");
    add_normal(emit, o, b + "norm0.weight", {D}, 0.1, 1.0);
    add_normal(emit, o, b + "norm1.weight", {D}, 0.1, 1.0);
    add_normal(emit, o, b + "wqkv.weight", {3 * Q, D}, inv_sqrt(D));
    add_normal(emit, o, b + "wo.weight", {D, Q}, inv_sqrt(Q));
    add_normal(emit, o, b + "mlp.fc0.weight", {I, D}, inv_sqrt(D));
    add_normal(emit, o, b + "mlp.fc1.weight", {D, I}, inv_sqrt(I));
  }
  add_normal(emit, o, "vision_tower.encoder.final_layernorm.weight", {D}, 0.1, 1.0);
  add_normal(emit, o, "mm_projector.proj.0.weight", {M, M}, inv_sqrt(M));
  add_normal(emit, o, "mm_projector.proj.2.weight", {T, M}, inv_sqrt(M));
  add_normal(emit, o, "mm_projector.post_norm.weight", {T}, 0.1, 1.0);
}

void write_synth_vision_files(const std::string& dir, const VisionConfig& c, const SynthVisionOptions& options) {
  SafetensorsWriter w;
  plan_synth_vision_tensors(c, options, [&w](const std::string& name, DType dtype, std::vector<int64_t> shape,
                                            SafetensorsWriter::Fill fill) {
    w.add(name, dtype, std::move(shape), std::move(fill));
  });
  w.write(dir + "/" + kShard);

  // The index: extend it, or create it for a single-file checkpoint.
  const std::string index_path = dir + "/model.safetensors.index.json";
  json index;
  if (file_exists(index_path)) {
    index = parse_json_document(read_text_file(index_path), index_path);
    K3_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(), index_path,
             ": missing 'weight_map' object");
  } else {
    const std::string single = dir + "/model.safetensors";
    K3_CHECK(file_exists(single), dir, ": no model.safetensors or model.safetensors.index.json to extend");
    index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
    const SafetensorsFile f(single);
    uint64_t bytes = 0;
    for (const auto& [name, view] : f.tensors()) {
      index["weight_map"][name] = "model.safetensors";
      bytes += view.nbytes;
    }
    index["metadata"]["total_size"] = bytes;
  }
  for (const std::string& name : w.names()) index["weight_map"][name] = kShard;
  if (index.contains("metadata") && index["metadata"].is_object() && index["metadata"].contains("total_size") &&
      index["metadata"]["total_size"].is_number_unsigned())
    index["metadata"]["total_size"] = index["metadata"]["total_size"].get<uint64_t>() + w.data_bytes();
  write_json(index_path, index);
  write_json(dir + "/preprocessor_config.json", released_preprocessor_config());
}

void add_synth_vision(const std::string& dir, int text_hidden, const SynthVisionOptions& options) {
  const std::string config_path = dir + "/config.json";
  json root = parse_json_document(read_text_file(config_path), config_path);
  K3_CHECK(root.is_object(), config_path, ": not a JSON object");
  root["vision_config"] = synth_vision_config(options, text_hidden);
  write_synth_vision_files(dir, parse_vision_config(root, config_path), options);  // as the loader will parse it
  write_json(config_path, root);  // last: the tower's files are all in place before config.json names it
}

void add_synth_vision(const std::string& dir, int text_hidden, uint64_t seed) {
  SynthVisionOptions o;
  o.seed = seed;
  add_synth_vision(dir, text_hidden, o);
}

}  // namespace k3
