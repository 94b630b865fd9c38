// From encoder output to language-model embeddings (as the released checkpoint defines them):
//   sd2_tpool merge: each image's (gh, gw) grid of patches becomes (gh/2)(gw/2) tokens, row-major
//     over the 2x2 cells, each the concatenation of its sub-patches (0,0),(0,1),(1,0),(1,1)
//     (feature index = sub * hidden + d; the mean over t is the identity for single images);
//   patchmergerv2 projector: proj.0 (4h -> 4h), exact-erf GELU, proj.2 (4h -> text_hidden), then
//     post_norm = RMSNorm(text_hidden, eps = projector_ln_eps).  No pre-norm, no biases.
#pragma once

#include <span>
#include <vector>

#include "vision/preprocess.h"
#include "vision/vision_config.h"
#include "vision/vision_weights.h"

namespace k3 {

// encoder_out [sum of patches, hidden] -> [sum of tokens, 4 * hidden], images in order.
std::vector<float> merge_sd2_tpool(const VisionConfig& c, const float* encoder_out, std::span<const GridThw> grids);

// merged [tokens, 4 * hidden] -> [tokens, text_hidden].
std::vector<float> run_projector(const VisionConfig& c, const VisionWeights& w, const std::vector<float>& merged);

}  // namespace k3
