#include "vision/vision_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/linear.h"
#include "vision/attention_kernels.h"

namespace k3 {
namespace {

constexpr int64_t kQueryBlock = 64;

}  // namespace

void packed_attention(const float* qkv, std::span<const int64_t> cu_seqlens, int heads, int head_dim, float* out) {
  const int64_t images = static_cast<int64_t>(cu_seqlens.size()) - 1;
  if (images <= 0) return;
  const int64_t N = cu_seqlens.back(), Q = static_cast<int64_t>(heads) * head_dim, stride = 3 * Q;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  ThreadPool& pool = global_pool();

  // Per head and image, keys and values transposed: [head_dim, n_image] each, at (h*N + s0)*head_dim.
  std::vector<float> keys_t(static_cast<size_t>(heads * N * head_dim)), values_t(keys_t.size());
  pool.run(heads * images, [&](int64_t task, int) {
    const int64_t h = task / images, img = task % images;
    const int64_t s0 = cu_seqlens[img], n = cu_seqlens[img + 1] - s0;
    float* kt = &keys_t[static_cast<size_t>((h * N + s0) * head_dim)];
    float* vt = &values_t[static_cast<size_t>((h * N + s0) * head_dim)];
    for (int64_t s = 0; s < n; ++s) {
      const float* row = qkv + (s0 + s) * stride + h * head_dim;
      for (int d = 0; d < head_dim; ++d) {
        kt[d * n + s] = row[Q + d];
        vt[d * n + s] = row[2 * Q + d];
      }
    }
  });

  // Tasks: (image, head, block of queries); offsets are relative to each image, so an image's
  // result does not depend on what is packed with it.
  std::vector<int64_t> first_task(images + 1, 0);
  for (int64_t i = 0; i < images; ++i) {
    const int64_t n = cu_seqlens[i + 1] - cu_seqlens[i];
    first_task[i + 1] = first_task[i] + heads * ((n + kQueryBlock - 1) / kQueryBlock);
  }
  pool.run(first_task.back(), [&](int64_t task, int) {
    const int64_t img = std::upper_bound(first_task.begin(), first_task.end(), task) - first_task.begin() - 1;
    const int64_t s0 = cu_seqlens[img], n = cu_seqlens[img + 1] - s0;
    const int64_t blocks = (n + kQueryBlock - 1) / kQueryBlock, local = task - first_task[img];
    const int64_t h = local / blocks, q0 = (local % blocks) * kQueryBlock, nq = std::min(kQueryBlock, n - q0);
    const float* kt = &keys_t[static_cast<size_t>((h * N + s0) * head_dim)];
    const float* vt = &values_t[static_cast<size_t>((h * N + s0) * head_dim)];

    thread_local std::vector<float> q, scores, o;
    q.resize(static_cast<size_t>(nq * head_dim));
    scores.resize(static_cast<size_t>(nq * n));
    o.resize(static_cast<size_t>(nq * head_dim));
    for (int64_t i = 0; i < nq; ++i) {
      const float* row = qkv + (s0 + q0 + i) * stride + h * head_dim;
      std::copy(row, row + head_dim, &q[i * head_dim]);
    }
    // scores = q k^T (short reduction: outer-product form); o = p v (long reduction: k3::linear).
    qk_scores(q.data(), nq, kt, n, head_dim, scores.data());
    softmax_rows(scores.data(), nq, n, scale);
    linear(Matrix{WeightFormat::kF32, head_dim, n, vt, nullptr}, scores.data(), nq, o.data());
    for (int64_t i = 0; i < nq; ++i)
      std::copy(&o[i * head_dim], &o[(i + 1) * head_dim], out + (s0 + q0 + i) * Q + h * head_dim);
  });
}

}  // namespace k3
