#include "vision/vision_config.h"

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/json_document.h"
#include "io/checkpoint.h"
#include "vision/json_fields.h"

namespace k3 {

VisionConfig parse_vision_config(const nlohmann::json& root, const std::string& source) {
  K3_CHECK(root.is_object(), source, ": not a JSON object");
  K3_CHECK(root.contains("vision_config") && root["vision_config"].is_object(), source,
           ": no 'vision_config' object (this checkpoint has no vision tower)");
  JsonFields f(root["vision_config"], "vision_config.");
  VisionConfig c;
  c.patch_size = f.integer("patch_size", std::nullopt, 1, 1024);
  c.pos_emb_height = f.integer("init_pos_emb_height", std::nullopt);
  c.pos_emb_width = f.integer("init_pos_emb_width", std::nullopt);
  c.pos_emb_time = f.integer("init_pos_emb_time", c.pos_emb_time);
  c.hidden_size = f.integer("vt_hidden_size", std::nullopt);
  c.num_layers = f.integer("vt_num_hidden_layers", std::nullopt, 0);
  c.num_heads = f.integer("vt_num_attention_heads", std::nullopt);
  c.qkv_hidden_size = f.integer("qkv_hidden_size", c.hidden_size);
  c.intermediate_size = f.integer("vt_intermediate_size", std::nullopt);
  c.mm_hidden_size = f.integer("mm_hidden_size", c.hidden_size);
  c.text_hidden_size = f.integer("text_hidden_size", std::nullopt);
  c.projector_ln_eps = static_cast<float>(f.number("projector_ln_eps", 1e-5, 0.0, 1.0));
  // Compared before the conversion: [2.5, 2] truncated to [2, 2] and passed.
  const std::vector<double> merge = f.numbers("merge_kernel_size", {2, 2}, 2);
  if (merge[0] != 2 || merge[1] != 2) f.problem("merge_kernel_size", "only [2, 2] is supported (as released)");

  f.choice("pos_emb_type", {"divided_fixed"}, "divided_fixed");
  f.choice("pos_emb_interpolation_mode", {"bilinear"}, "bilinear");
  f.choice("merge_type", {"sd2_tpool"}, "sd2_tpool");
  f.choice("mm_projector_type", {"patchmergerv2"}, std::nullopt);
  f.choice("projector_hidden_act", {"gelu"}, "gelu");
  f.choice("norm_type", {"rmsnorm"}, "rmsnorm");
  f.choice("mlp_type", {"mlp2"}, "mlp2");
  f.choice("activation_func", {"gelu_pytorch_tanh"}, "gelu_pytorch_tanh");
  for (const char* key : {"attn_bias", "linear_bias", "patch_embed_proj_bias"})
    if (f.boolean(key, false)) f.problem(key, "biases are not supported (the released tower has none)");

  if (c.num_heads > 0 && c.qkv_hidden_size % c.num_heads != 0)
    f.problem("qkv_hidden_size",
              cat(c.qkv_hidden_size, " is not divisible by vt_num_attention_heads (", c.num_heads, ")"));
  else if (c.num_heads > 0 && c.head_dim() % 4 != 0)
    f.problem("qkv_hidden_size", cat("head dim ", c.head_dim(), " must be a multiple of 4 for the 2-D RoPE"));
  if (c.mm_hidden_size != c.hidden_size)
    f.problem("mm_hidden_size", cat(c.mm_hidden_size, " must equal vt_hidden_size (", c.hidden_size, ")"));
  throw_if_problems(f.problems(), source, "vision_config");
  return c;
}

VisionConfig load_vision_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  return parse_vision_config(parse_json_document(read_text_file(path), path), path);
}

}  // namespace k3
