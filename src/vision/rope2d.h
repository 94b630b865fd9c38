// MoonViT's 2-D rotary embedding (Rope2DPosEmbRepeated, theta 10000) on query and key heads.
// For head_dim d there are d/4 frequencies w_i = theta^(-4i/d) (computed in float32 as torch
// does) and d/2 complex pairs taken from interleaved real dims (2k, 2k+1).  Pair 2i rotates by
// column * w_i and pair 2i+1 by row * w_i: the width pair comes first (the code, not the
// docstring; fixture README "rope").  Positions are the patch's own (row, col) in its image.
#pragma once

#include <cstdint>
#include <vector>

namespace k3 {

class Rope2D {
 public:
  Rope2D(int head_dim, float theta);

  // Rotates `heads` vectors of head_dim at x (stride head_dim) for the patch at (row, col).
  void apply(float* x, int heads, int row, int col) const;
  int head_dim() const { return head_dim_; }

 private:
  int head_dim_;
  std::vector<float> freqs_;  // d/4
};

}  // namespace k3
