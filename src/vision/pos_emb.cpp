#include "vision/pos_emb.h"

#include <algorithm>

namespace k3 {
namespace {

struct Tap {
  int i0, i1;
  float l0, l1;  // weights of i0 and i1
};

// PyTorch's area_pixel_compute_source_index for linear modes, align_corners = False.
std::vector<Tap> linear_taps(int in, int out) {
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  std::vector<Tap> taps(out);
  for (int o = 0; o < out; ++o) {
    const float src = std::max(0.0f, scale * (static_cast<float>(o) + 0.5f) - 0.5f);
    const int i0 = static_cast<int>(src);
    const int i1 = i0 + (i0 < in - 1 ? 1 : 0);
    const float l1 = src - static_cast<float>(i0);
    taps[o] = {i0, i1, 1.0f - l1, l1};
  }
  return taps;
}

}  // namespace

std::vector<float> interpolate_pos_emb(const std::vector<float>& table, int H, int W, int D, int gh, int gw) {
  if (gh == H && gw == W) return table;
  const std::vector<Tap> ty = linear_taps(H, gh), tx = linear_taps(W, gw);
  std::vector<float> out(static_cast<size_t>(gh) * gw * D);
  for (int y = 0; y < gh; ++y)
    for (int x = 0; x < gw; ++x) {
      const Tap& a = ty[y];
      const Tap& b = tx[x];
      const float* p00 = &table[(static_cast<size_t>(a.i0) * W + b.i0) * D];
      const float* p01 = &table[(static_cast<size_t>(a.i0) * W + b.i1) * D];
      const float* p10 = &table[(static_cast<size_t>(a.i1) * W + b.i0) * D];
      const float* p11 = &table[(static_cast<size_t>(a.i1) * W + b.i1) * D];
      float* o = &out[(static_cast<size_t>(y) * gw + x) * D];
      for (int d = 0; d < D; ++d)
        o[d] = a.l0 * (b.l0 * p00[d] + b.l1 * p01[d]) + a.l1 * (b.l0 * p10[d] + b.l1 * p11[d]);
    }
  return out;
}

}  // namespace k3
