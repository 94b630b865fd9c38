// Typed views of the vision tower and projector tensors (the released checkpoint's names):
//   vision_tower.patch_embed.proj.weight          [hidden, 3, p, p]   (the conv as a matrix)
//   vision_tower.patch_embed.pos_emb.weight       [H, W, hidden]
//   vision_tower.encoder.blocks.B.norm0/norm1     [hidden]
//   vision_tower.encoder.blocks.B.wqkv            [3 * qkv_hidden, hidden]  rows q | k | v, head-major
//   vision_tower.encoder.blocks.B.wo              [hidden, qkv_hidden]
//   vision_tower.encoder.blocks.B.mlp.fc0 / fc1   [inter, hidden] / [hidden, inter]
//   vision_tower.encoder.final_layernorm.weight   [hidden]
//   mm_projector.proj.0 / proj.2 / post_norm      [4m, 4m] / [text, 4m] / [text]
// Matrices (BF16 or F32) stay in the memory-mapped checkpoint; vectors and the position table
// are widened to fp32.  Every problem -- missing tensors, wrong shapes or dtypes, and tensors
// under vision_tower. / mm_projector. that k3 would silently ignore (biases) -- is reported in
// one k3::Error.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "io/checkpoint.h"
#include "kernels/matrix.h"
#include "vision/vision_config.h"

namespace k3 {

struct VisionBlockWeights {
  std::vector<float> norm0, norm1;
  Matrix wqkv, wo, fc0, fc1;
};

struct VisionWeights {
  Matrix patch_embed;          // [hidden, 3*p*p], columns in (c, ky, kx) order
  std::vector<float> pos_emb;  // [H, W, hidden]
  std::vector<VisionBlockWeights> blocks;
  std::vector<float> final_norm;
  Matrix proj0, proj2;
  std::vector<float> post_norm;

  // Realigned copies of tensors that were not naturally aligned in the file.
  std::vector<std::unique_ptr<uint8_t[]>> owned;
};

VisionWeights bind_vision_weights(const Checkpoint& ckpt, const VisionConfig& config);

}  // namespace k3
