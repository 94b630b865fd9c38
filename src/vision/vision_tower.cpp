#include "vision/vision_tower.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/norm.h"
#include "vision/pos_emb.h"
#include "vision/rope2d.h"
#include "vision/vision_attention.h"

namespace k3 {
namespace {

// gelu_pytorch_tanh.
inline float gelu_tanh(float x) {
  constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
  constexpr float kKappa = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(kBeta * (x + kKappa * x * x * x)));
}

void add_into(std::vector<float>& x, const std::vector<float>& y) {
  for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
}

}  // namespace

void check_vision_grids(const VisionConfig& c, std::span<const GridThw> grids) {
  K3_CHECK(!grids.empty(), "vision: no images to encode");
  for (size_t i = 0; i < grids.size(); ++i) {
    const GridThw& g = grids[i];
    K3_CHECK(g.t == 1, "vision: image ", i, " has ", g.t, " frames; only single images are supported");
    K3_CHECK(g.h > 0 && g.w > 0 && g.h % c.merge_h == 0 && g.w % c.merge_w == 0, "vision: image ", i, " has grid ", g.h,
             "x", g.w, " patches; both sides must be positive multiples of the merge kernel ", c.merge_h, "x",
             c.merge_w);
    K3_CHECK(g.h <= c.rope_max_side && g.w <= c.rope_max_side, "vision: image ", i, " has grid ", g.h, "x", g.w,
             " patches; the largest supported side is ", c.rope_max_side);
  }
}

std::vector<float> run_vision_tower(const VisionConfig& c, const VisionWeights& w, const float* pixel_values,
                                    std::span<const GridThw> grids, VisionTrace* trace) {
  check_vision_grids(c, grids);
  const int64_t D = c.hidden_size, Q = c.qkv_hidden_size, I = c.intermediate_size;
  std::vector<int64_t> cu{0};
  for (const GridThw& g : grids) cu.push_back(cu.back() + g.patches());
  const int64_t N = cu.back();

  // Patch embedding + position embedding.
  std::vector<float> x(static_cast<size_t>(N * D)), pos(x.size());
  linear(w.patch_embed, pixel_values, N, x.data());
  for (size_t i = 0; i < grids.size(); ++i) {
    const std::vector<float> p =
        interpolate_pos_emb(w.pos_emb, c.pos_emb_height, c.pos_emb_width, c.hidden_size, grids[i].h, grids[i].w);
    std::copy(p.begin(), p.end(), pos.begin() + cu[i] * D);
  }
  add_into(x, pos);
  if (trace != nullptr) {
    trace->pos_emb = pos;
    trace->patch_embed = x;
    trace->blocks.clear();
  }

  const Rope2D rope(c.head_dim(), c.rope_theta);
  ThreadPool& pool = global_pool();
  std::vector<float> h(x.size()), qkv(static_cast<size_t>(N * 3 * Q)), attn(static_cast<size_t>(N * Q));
  std::vector<float> mlp(static_cast<size_t>(N * I)), delta(x.size());
  for (const VisionBlockWeights& B : w.blocks) {
    rms_norm(x.data(), N, D, B.norm0.data(), c.norm_eps, h.data());
    linear(B.wqkv, h.data(), N, qkv.data());
    pool.parallel_for(N, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) {
        const size_t i = std::upper_bound(cu.begin(), cu.end(), t) - cu.begin() - 1;  // t's image
        const int r = static_cast<int>((t - cu[i]) / grids[i].w), col = static_cast<int>((t - cu[i]) % grids[i].w);
        float* row = &qkv[static_cast<size_t>(t * 3 * Q)];
        rope.apply(row, c.num_heads, r, col);      // q
        rope.apply(row + Q, c.num_heads, r, col);  // k
      }
    });
    packed_attention(qkv.data(), cu, c.num_heads, c.head_dim(), attn.data());
    linear(B.wo, attn.data(), N, delta.data());
    add_into(x, delta);

    rms_norm(x.data(), N, D, B.norm1.data(), c.norm_eps, h.data());
    linear(B.fc0, h.data(), N, mlp.data());
    pool.parallel_for(N * I, 1024, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) mlp[i] = gelu_tanh(mlp[i]);
    });
    linear(B.fc1, mlp.data(), N, delta.data());
    add_into(x, delta);
    if (trace != nullptr) trace->blocks.push_back(x);
  }
  rms_norm(x.data(), N, D, w.final_norm.data(), c.norm_eps, x.data());
  if (trace != nullptr) trace->encoder_out = x;
  return x;
}

}  // namespace k3
