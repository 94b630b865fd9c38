// MoonViT-V2's `divided_fixed` position embedding for one image: the learned table
// pos_emb.weight [H, W, D] resampled to the image's patch grid (gh, gw) as a D-channel H x W
// image with PyTorch's F.interpolate(mode="bilinear", align_corners=False) -- no antialias,
// source = max(0, (dst + 0.5) * in/out - 0.5), edge taps clamped -- then flattened row-major.
// The table is used as is when the grid equals its size.  fp32 throughout (the fixture's
// resolved choice; HF interpolates the bf16 parameter in bf16).  Single images (t = 1) get no
// time embedding.
#pragma once

#include <cstdint>
#include <vector>

namespace k3 {

// Returns [gh * gw, D].
std::vector<float> interpolate_pos_emb(const std::vector<float>& table, int H, int W, int D, int gh, int gw);

}  // namespace k3
