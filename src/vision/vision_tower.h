// The MoonViT-V2 encoder (docs/architecture.md) over images packed into one sequence:
//   x = patch_conv(pixels) + interpolated pos_emb                      (pos_emb.h)
//   per block:  x += wo(attn(rope(wqkv(rms_norm0(x)))))                 (rope2d.h, vision_attention.h)
//               x += fc1(gelu_tanh(fc0(rms_norm1(x))))
//   encoder_out = final_layernorm(x)
// Norms are RMSNorm with eps = float32 epsilon; no biases; fp32 math on the bf16 weights.  The
// result for each image does not depend on what else is packed with it.  Work runs on the
// global thread pool (base/thread_pool.h; K3_THREADS).
#pragma once

#include <span>
#include <vector>

#include "vision/preprocess.h"
#include "vision/vision_config.h"
#include "vision/vision_weights.h"

namespace k3 {

// Optional intermediates over the packed sequence (row-major), for tests and debugging.
struct VisionTrace {
  std::vector<float> pos_emb;              // [N, hidden]
  std::vector<float> patch_embed;          // [N, hidden], the input of block 0
  std::vector<std::vector<float>> blocks;  // per block [N, hidden]
  std::vector<float> encoder_out;          // [N, hidden]
  std::vector<float> merged;               // [tokens, 4 * hidden]
};

// Throws k3::Error unless every grid is a single frame whose sides are positive multiples of
// the merge kernel and within the RoPE table (512 patches).
void check_vision_grids(const VisionConfig& c, std::span<const GridThw> grids);

// pixel_values: [sum of patches, 3, p, p].  Returns encoder_out [sum of patches, hidden].
std::vector<float> run_vision_tower(const VisionConfig& c, const VisionWeights& w, const float* pixel_values,
                                    std::span<const GridThw> grids, VisionTrace* trace = nullptr);

}  // namespace k3
