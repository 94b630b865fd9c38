#include "vision/vision_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/thread_pool.h"
#include "vision/attention_kernels.h"

namespace k3 {
namespace {

constexpr int64_t kQueryTile = 64;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace

void packed_attention(const float* qkv, std::span<const int64_t> cu_seqlens, int heads, int head_dim, float* out) {
  const int64_t images = static_cast<int64_t>(cu_seqlens.size()) - 1;
  if (images <= 0) return;
  const int64_t Q = static_cast<int64_t>(heads) * head_dim, stride = 3 * Q;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const AttentionBlocking blk = attention_blocking();
  const int hd_pad = static_cast<int>(round_up(head_dim, blk.vec));
  ThreadPool& pool = global_pool();

  // Per (head, image): keys transposed per key block [n_pad / key_block][head_dim][key_block]
  // (each block contiguous) and values [n_pad, hd_pad], zero-padded.
  std::vector<int64_t> base(images + 1, 0);  // offsets (in padded keys) of each image
  for (int64_t i = 0; i < images; ++i) base[i + 1] = base[i] + round_up(cu_seqlens[i + 1] - cu_seqlens[i], blk.key_block);
  const int64_t NP = base.back();
  std::vector<float> keys_t(static_cast<size_t>(heads * NP * head_dim)), values(static_cast<size_t>(heads * NP * hd_pad));
  pool.run(heads * images, [&](int64_t task, int) {
    const int64_t h = task / images, img = task % images;
    const int64_t s0 = cu_seqlens[img], n = cu_seqlens[img + 1] - s0, n_pad = base[img + 1] - base[img];
    float* kt = &keys_t[static_cast<size_t>((h * NP + base[img]) * head_dim)];
    float* vp = &values[static_cast<size_t>((h * NP + base[img]) * hd_pad)];
    std::fill(kt, kt + n_pad * head_dim, 0.0f);
    std::fill(vp, vp + n_pad * hd_pad, 0.0f);
    for (int64_t s = 0; s < n; ++s) {
      const float* row = qkv + (s0 + s) * stride + h * head_dim;
      float* kb = kt + (s / blk.key_block) * head_dim * blk.key_block + s % blk.key_block;
      for (int d = 0; d < head_dim; ++d) kb[d * blk.key_block] = row[Q + d];
      std::copy(row + 2 * Q, row + 2 * Q + head_dim, vp + s * hd_pad);
    }
  });

  // Tasks: (image, head, tile of queries); offsets are relative to each image, so an image's
  // result does not depend on what is packed with it.
  std::vector<int64_t> first_task(images + 1, 0);
  for (int64_t i = 0; i < images; ++i) {
    const int64_t n = cu_seqlens[i + 1] - cu_seqlens[i];
    first_task[i + 1] = first_task[i] + heads * ((n + kQueryTile - 1) / kQueryTile);
  }
  pool.run(first_task.back(), [&](int64_t task, int) {
    const int64_t img = std::upper_bound(first_task.begin(), first_task.end(), task) - first_task.begin() - 1;
    const int64_t s0 = cu_seqlens[img], n = cu_seqlens[img + 1] - s0;
    const int64_t tiles = (n + kQueryTile - 1) / kQueryTile, local = task - first_task[img];
    const int64_t h = local / tiles, q0 = (local % tiles) * kQueryTile, nq = std::min(kQueryTile, n - q0);
    const float* kt = &keys_t[static_cast<size_t>((h * NP + base[img]) * head_dim)];
    const float* vp = &values[static_cast<size_t>((h * NP + base[img]) * hd_pad)];

    thread_local std::vector<float> q, scratch;
    q.assign(static_cast<size_t>(round_up(nq, blk.rows) * head_dim), 0.0f);
    scratch.resize(static_cast<size_t>(attention_scratch_floats(nq, hd_pad)));
    for (int64_t i = 0; i < nq; ++i) {
      const float* row = qkv + (s0 + q0 + i) * stride + h * head_dim;
      std::copy(row, row + head_dim, &q[i * head_dim]);
    }
    attention_tile(q.data(), nq, kt, vp, n, head_dim, hd_pad, scale, out + (s0 + q0) * Q + h * head_dim, Q,
                   scratch.data());
  });
}

void packed_attention_reference(const float* qkv, std::span<const int64_t> cu_seqlens, int heads, int head_dim,
                                float* out) {
  const int64_t Q = static_cast<int64_t>(heads) * head_dim, stride = 3 * Q;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (size_t img = 0; img + 1 < cu_seqlens.size(); ++img) {
    const int64_t s0 = cu_seqlens[img], n = cu_seqlens[img + 1] - s0;
    std::vector<float> p(static_cast<size_t>(n));
    for (int h = 0; h < heads; ++h)
      for (int64_t i = 0; i < n; ++i) {
        const float* q = qkv + (s0 + i) * stride + h * head_dim;
        float mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          const float* k = qkv + (s0 + j) * stride + Q + h * head_dim;
          float dot = 0.0f;
          for (int d = 0; d < head_dim; ++d) dot += q[d] * k[d];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          p[j] = std::exp(p[j] - mx);
          sum += p[j];
        }
        float* o = out + (s0 + i) * Q + h * head_dim;
        for (int d = 0; d < head_dim; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j < n; ++j) acc += static_cast<double>(p[j]) * qkv[(s0 + j) * stride + 2 * Q + h * head_dim + d];
          o[d] = static_cast<float>(acc / sum);
        }
      }
  }
}

}  // namespace k3
