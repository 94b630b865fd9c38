// Gated Multi-head Latent Attention, NoPE (docs/architecture.md) over a batch.  Each sequence
// caches one latent row per token: kv_a_layernorm(c_kv) followed by the raw k_rope.
//   absorbed: q_lat = W_UK^T q_nope attends the latent rows directly (MQA over 576 dims), and
//             W_UV maps the attended latent back -- cheapest when few queries read a long cache;
//   decompressed: per head, blocks of cached rows are decompressed through kv_b into K and V and
//             every query of the segment attends them with an online softmax (mla_prefill.h) --
//             cheaper for long prefill segments (320 instead of 1088 multiply-adds per query,
//             key and head, plus a decompression shared by the whole segment).  It runs in fp32
//             whatever the precision option (which applies to the projections).
// Both are the same math; the scale is (qk_nope + qk_rope)^-1/2; nothing is rotated.  The
// output is multiplied by sigmoid(g_proj x) before o_proj.
#pragma once

#include "kernels/linear.h"
#include "model/batch.h"
#include "model/weights.h"

namespace k3 {

// kAuto: per segment, whichever form does less work at the two kernels' measured speeds
// (mla_prefill_prefers_decompressed); decode steps always run absorbed.
enum class MlaMode { kAuto, kAbsorbed, kDecompressed };

struct MlaOptions {
  MlaMode mode = MlaMode::kAuto;
};

void mla_layer_forward(const MlaWeights& w, const TextConfig& c, const BatchLayout& batch, int index, const float* x,
                       float* out, const MlaOptions& options = {}, Precision precision = Precision::kF32);

}  // namespace k3
