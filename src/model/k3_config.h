// The typed, validated model configuration read from a checkpoint's config.json.
// Accepts the official Kimi K3 layout (model_type "kimi_k3" with a "text_config" of model_type
// "kimi_linear") and a bare "kimi_linear" text config.  Anything k3 cannot run exactly (unknown
// architectures, RoPE MLA, other quantisation formats, grouped routing ...) is refused with a
// message naming the field; all problems are reported together.
#pragma once

#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace k3 {

enum class LayerKind { kKda, kMla };
enum class Activation { kSitu, kSilu };

struct KdaConfig {
  int num_heads = 0;
  int head_dim = 0;
  int conv_kernel = 4;
  // Present (K3: -5) => bounded gate lb*sigmoid(exp(A)*(f+dt)); absent => -exp(A)*softplus(f+dt).
  std::optional<float> gate_lower_bound;
  bool full_rank_gate = false;  // g_proj (true) or g_a_proj -> g_b_proj (false)
  int low_rank_gate_dim = 0;    // only for the low-rank gate; equals head_dim in Kimi-Linear
};

// compressed-tensors "mxfp4-pack-quantized": which Linear modules are packed.
struct QuantConfig {
  bool enabled = false;
  int group_size = 32;
  std::vector<std::string> ignore_patterns;  // as written ("re:..." or exact names)
  // True if the Linear module (full name without ".weight") is stored packed.
  bool is_quantized(const std::string& module) const;

 private:
  friend struct ConfigParser;
  std::vector<std::regex> regexes_;
  std::vector<std::string> exact_;
};

struct TextConfig {
  int hidden_size = 0;
  int num_layers = 0;
  int vocab_size = 0;
  float rms_norm_eps = 1e-5f;
  int max_position_embeddings = 0;
  bool tie_word_embeddings = false;

  std::vector<LayerKind> layer_kinds;  // from linear_attn_config (1-based lists)
  KdaConfig kda;

  // Gated MLA (NoPE).
  int num_heads = 0;
  std::optional<int> q_lora_rank;  // absent => plain q_proj
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  bool mla_output_gate = false;
  float mla_norm_eps = 1e-6f;  // q_a_layernorm / kv_a_layernorm (KimiRMSNorm default)

  // FFN.
  Activation act = Activation::kSitu;
  float situ_beta = 4.0f;
  float situ_linear_beta = 25.0f;
  int intermediate_size = 0;  // dense layers
  int first_k_dense_replace = 0;
  int moe_layer_freq = 1;
  int num_experts = 0;
  int top_k = 0;
  int num_shared_experts = 0;
  int moe_intermediate_size = 0;
  std::optional<int> latent_size;  // routed_expert_hidden_size (LatentMoE) or absent
  bool latent_norm = false;
  bool renormalize = true;
  float routed_scaling_factor = 1.0f;

  // Block Attention Residuals; absent => plain residual stream.
  std::optional<int> attn_res_block_size;

  QuantConfig quant;

  bool is_moe_layer(int layer) const;
  int num_kda_layers() const;
  int num_mla_layers() const;
  // Derived widths, computed in 64 bits: each field may be up to 2^30, so an int product or sum
  // could overflow (UB).  parse_model_config rejects configs whose derived widths exceed
  // kMaxDerivedWidth, so for a parsed config the narrowing back to int is exact.
  static constexpr int64_t kMaxDerivedWidth = int64_t{1} << 24;
  int kda_width() const { return static_cast<int>(int64_t{kda.num_heads} * kda.head_dim); }
  int mla_qk_head_dim() const { return static_cast<int>(int64_t{qk_nope_head_dim} + qk_rope_head_dim); }
  int mla_cache_width() const { return static_cast<int>(int64_t{kv_lora_rank} + qk_rope_head_dim); }
};

struct ModelConfig {
  std::string model_type;     // "kimi_k3" or "kimi_linear"
  std::string tensor_prefix;  // "language_model." for kimi_k3, "" for a bare kimi_linear
  TextConfig text;
  int bos_token_id = -1;
  std::vector<int> stop_token_ids;  // eos plus K3's document end
  int pad_token_id = -1;
  int media_placeholder_token_id = -1;
  bool has_vision = false;

  // Short human-readable layer schedule, e.g. "KKKMKKKM..." (K = KDA, M = MLA).
  std::string schedule_string() const;
};

// Parses config JSON text; `source` names it in errors.  Throws k3::Error listing every problem.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);
// Reads DIR/config.json.
ModelConfig load_model_config(const std::string& dir);

}  // namespace k3
