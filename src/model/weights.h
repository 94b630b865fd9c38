// Typed views of a K3 checkpoint's tensors, bound and validated against the config before
// anything runs.  Large matrices stay in the memory-mapped shards; small vectors (norm gains,
// gate parameters, conv taps) are widened to fp32 copies.  Every problem (missing tensor, wrong
// shape or dtype, NaN MXFP4 scale) is collected and reported together.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dist/expert_plan.h"
#include "io/checkpoint.h"
#include "kernels/matrix.h"
#include "model/k3_config.h"

namespace k3 {

using Vec = std::vector<float>;

struct MlpWeights {  // gate/up/down (w1/w3/w2 for experts)
  Matrix gate, up, down;
};

struct KdaWeights {
  Matrix q, k, v;
  Vec q_conv, k_conv, v_conv;  // [P][W]
  Matrix f_a, f_b;             // forget-gate low-rank pair
  Matrix b;                    // beta logits [H, hidden]
  Vec a_log;                   // [H] (the checkpoint stores head_dim entries; only the first H are live)
  Vec dt_bias;                 // [P]
  Matrix g;                    // full-rank output gate [P, hidden] ...
  Matrix g_a, g_b;             // ... or the low-rank pair
  Vec o_norm;                  // [head_dim]
  Matrix o;                    // [hidden, P]
};

struct MlaWeights {
  Matrix q_a;      // [q_lora, hidden] (empty without q_lora)
  Vec q_a_norm;    // [q_lora]
  Matrix q_b;      // [H*(nope+rope), q_lora] or q_proj [H*(nope+rope), hidden]
  Matrix kv_a;     // [kv_lora + rope, hidden]
  Vec kv_a_norm;   // [kv_lora]
  Matrix kv_b;     // [H*(nope+v), kv_lora]
  Matrix g;        // output gate [H*v, hidden] (empty without mla_use_output_gate)
  Matrix o;        // [hidden, H*v]
};

struct MoeWeights {
  Matrix router;            // [E, hidden]
  Vec router_bias;          // e_score_correction_bias [E]
  Matrix latent_down;       // [latent, hidden] (LatentMoE only)
  Matrix latent_up;         // [hidden, latent]
  Vec latent_norm;          // routed_expert_norm [latent]
  std::vector<MlpWeights> experts;
  MlpWeights shared;        // empty gate when there are no shared experts
  // Which rank holds which expert in the throughput layout (model/partition.h, apply_layout);
  // not parallel: every expert is here, split by rows over several ranks (the latency layout).
  dist::ExpertPlacement placement;
};

struct LayerWeights {
  LayerKind kind = LayerKind::kKda;
  bool moe = false;
  Vec input_norm, post_norm;
  Vec attn_res_query, mlp_res_query;  // res_norm.weight (.) res_proj.weight, empty without AttnRes
  KdaWeights kda;
  MlaWeights mla;
  MlpWeights dense;
  MoeWeights moe_w;
};

struct ModelWeights {
  Matrix embed;    // [vocab, hidden]
  Matrix lm_head;  // [vocab, hidden]
  Vec final_norm;
  Vec out_res_query;
  std::vector<LayerWeights> layers;

  uint64_t total_params = 0;
  uint64_t total_bytes = 0;
  size_t tensor_count = 0;  // tensors used by the text model
  std::vector<std::string> unused_tensors;  // present in the checkpoint, not used by the text model

  // Keeps fp32 copies and realigned tensors alive.
  std::vector<std::unique_ptr<uint8_t[]>> owned;
  // Memory the weights were copied into after binding (a rank's own rows, model/partition.h).
  std::vector<std::shared_ptr<void>> arenas;
};

struct BindOptions {
  // Scan every E8M0 scale for 0xFF (NaN) at bind time, noting zero-free matrices: done for a
  // checkpoint read into memory only; mapped and streamed experts are checked on first use.
  bool verify_mxfp4_scales = true;
};

// Throws k3::Error listing every problem found.
ModelWeights bind_weights(const Checkpoint& ckpt, const ModelConfig& config, const BindOptions& options = {});

}  // namespace k3
