// A Kimi Delta Attention layer (docs/architecture.md; Kimi Linear, arXiv:2510.26692) over a batch:
// q/k/v projections -> causal short conv + SiLU (per-sequence history) -> per-head L2 norm, q
// scaled by head_dim^-0.5 -> forget gate (bounded sigmoid for K3, softplus for Kimi-Linear) and
// sigmoid beta -> fp32 delta rule (token-by-token for a single new token, chunked otherwise) ->
// per-head RMSNorm gated by sigmoid(g_proj x) -> o_proj.
#pragma once

#include "kernels/kda.h"
#include "kernels/linear.h"
#include "model/batch.h"
#include "model/weights.h"

namespace k3 {

struct KdaOptions {
  int chunk = kKdaChunk;      // chunk length of the chunked (prefill) form (kernels/kda.h)
  bool force_recurrent = false;  // token-by-token even for multi-token steps (tests)
};

// x: normed layer input [rows, hidden]; out: [rows, hidden].  `index` = ordinal among KDA layers;
// `precision`: that of the layer's projections (kernels/linear.h).
void kda_layer_forward(const KdaWeights& w, const TextConfig& c, const BatchLayout& batch, int index, const float* x,
                       float* out, const KdaOptions& options = {}, Precision precision = Precision::kF32);

}  // namespace k3
