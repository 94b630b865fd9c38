// The MoonViT-V2 tower and patchmergerv2 projector settings: the `vision_config` object of a
// Kimi K3 config.json (official field names).  Validated as a whole:
// every missing or out-of-range field, and every variant k3 does not implement (another
// projector, merge, norm, activation or position-embedding mode, biases), is reported together.
#pragma once

#include <limits>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace k3 {

struct VisionConfig {
  int patch_size = 14;
  int pos_emb_height = 64;  // init_pos_emb_height / width: the learned table [H, W, hidden]
  int pos_emb_width = 64;
  int pos_emb_time = 4;    // init_pos_emb_time (video only)
  int hidden_size = 1024;  // vt_hidden_size
  int num_layers = 27;     // vt_num_hidden_layers
  int num_heads = 12;      // vt_num_attention_heads
  int qkv_hidden_size = 1536;
  int intermediate_size = 4096;  // vt_intermediate_size
  int merge_h = 2, merge_w = 2;  // merge_kernel_size
  int mm_hidden_size = 1024;     // projector input per sub-patch (= hidden_size)
  int text_hidden_size = 7168;   // projector output
  float projector_ln_eps = 1e-5f;
  // Tower RMSNorms are torch.nn.RMSNorm(dim) with eps=None: float32 epsilon (fixture README).
  float norm_eps = std::numeric_limits<float>::epsilon();
  float rope_theta = 10000.0f;
  int rope_max_side = 512;  // Rope2DPosEmbRepeated(dim, 512, 512)

  int head_dim() const { return qkv_hidden_size / num_heads; }
  int merge_cells() const { return merge_h * merge_w; }
  int patch_dim() const { return 3 * patch_size * patch_size; }
};

// Parses the `vision_config` object of a config.json root.  Throws k3::Error naming `source`
// and every bad field ("vision_config.vt_hidden_size: ...").
VisionConfig parse_vision_config(const nlohmann::json& root, const std::string& source);
// Reads DIR/config.json.
VisionConfig load_vision_config(const std::string& dir);

}  // namespace k3
