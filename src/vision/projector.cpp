#include "vision/projector.h"

#include <algorithm>
#include <cmath>

#include "base/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/norm.h"

namespace k3 {

std::vector<float> merge_sd2_tpool(const VisionConfig& c, const float* encoder_out, std::span<const GridThw> grids) {
  const int64_t D = c.hidden_size, kh = c.merge_h, kw = c.merge_w, M = D * kh * kw;
  int64_t tokens = 0;
  for (const GridThw& g : grids) tokens += (g.h / kh) * (g.w / kw);
  std::vector<float> out(static_cast<size_t>(tokens * M));
  float* dst = out.data();
  const float* src = encoder_out;
  for (const GridThw& g : grids) {
    for (int64_t i = 0; i < g.h / kh; ++i)
      for (int64_t j = 0; j < g.w / kw; ++j)
        for (int64_t di = 0; di < kh; ++di)
          for (int64_t dj = 0; dj < kw; ++dj, dst += D) {
            const float* p = src + ((i * kh + di) * g.w + (j * kw + dj)) * D;
            std::copy(p, p + D, dst);
          }
    src += g.patches() * D;
  }
  return out;
}

std::vector<float> run_projector(const VisionConfig& c, const VisionWeights& w, const std::vector<float>& merged) {
  const int64_t M = w.proj0.cols, T = c.text_hidden_size;
  const int64_t n = static_cast<int64_t>(merged.size()) / M;
  std::vector<float> h(static_cast<size_t>(n * w.proj0.rows)), out(static_cast<size_t>(n * T));
  linear(w.proj0, merged.data(), n, h.data());
  global_pool().parallel_for(static_cast<int64_t>(h.size()), 1024, [&h](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) h[i] = 0.5f * h[i] * (1.0f + std::erf(h[i] * 0.70710678118654752f));  // exact erf
  });
  linear(w.proj2, h.data(), n, out.data());
  rms_norm(out.data(), n, T, w.post_norm.data(), c.projector_ln_eps, out.data());
  return out;
}

}  // namespace k3
