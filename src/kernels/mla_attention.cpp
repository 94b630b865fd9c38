#include "kernels/mla_attention.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/cpu_features.h"
#include "base/numeric_types.h"
#include "base/thread_pool.h"
#include "kernels/simd/dispatch.h"
#include "kernels/simd/exp.h"
#include "kernels/small_gemm.h"

namespace k3 {

void mla_decode_attention(const float* q, const float* cache, int64_t n, int heads, int lora, int rope, float scale,
                          float* o_lat) {
  K3_ISA_DISPATCH(active_isa(), mla_decode_attention(q, cache, n, heads, lora, rope, scale, o_lat));
}

void mla_decode_attention(const float* q, const uint16_t* cache_bf16, int64_t n, int heads, int lora, int rope,
                          float scale, float* o_lat) {
  K3_ISA_DISPATCH(active_isa(), mla_decode_attention(q, cache_bf16, n, heads, lora, rope, scale, o_lat));
}

namespace mla_detail {

void merge_tasks(const float* m, const float* l, int64_t ld_ml, const float* o, int64_t ld_task, int64_t ldo,
                 int64_t tasks, int heads, int lora, float* o_lat) {
  for (int h = 0; h < heads; ++h) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t t = 0; t < tasks; ++t) mx = std::max(mx, m[t * ld_ml + h]);
    float* out = o_lat + static_cast<int64_t>(h) * lora;
    std::fill(out, out + lora, 0.0f);
    float sum = 0.0f;
    for (int64_t t = 0; t < tasks; ++t) {
      const float w = std::exp(m[t * ld_ml + h] - mx);
      sum += w * l[t * ld_ml + h];
      const float* po = o + t * ld_task + h * ldo;
      for (int c = 0; c < lora; ++c) out[c] += w * po[c];
    }
    const float inv = 1.0f / sum;
    for (int c = 0; c < lora; ++c) out[c] *= inv;
  }
}

}  // namespace mla_detail

namespace portable {
namespace {

constexpr int64_t kBlock = 64;  // cache rows per block: a 64-row panel of 64 columns fits L1
constexpr int kSlice = 64;      // score products run over 64-wide slices of the latent

// e^x for x <= 0 (Cephes' expf, simd/exp.h, in scalar steps; 0 below the normal range).
// Branch-free so the compiler vectorises the loop that calls it.
inline float exp_nonpos(float x) {
  using namespace simd;
  const float xc = std::max(x, -87.0f);
  const float n = (xc * kExpLog2e + 12582912.0f) - 12582912.0f;  // round to nearest (1.5 * 2^23)
  float r = xc - n * kExpLn2Hi;
  r = r - n * kExpLn2Lo;
  float y = kExpP0;
  y = y * r + kExpP1;
  y = y * r + kExpP2;
  y = y * r + kExpP3;
  y = y * r + kExpP4;
  y = y * r + kExpP5;
  y = y * r * r + r + 1.0f;
  const float p2 = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < -87.0f ? 0.0f : y * p2;
}

// Online softmax over cache rows [j0, j1) for all heads into m, l [heads] and o [heads][width];
// each block of rows is read once for all heads (scores: q [H][width] x block^T, values:
// p [H][b] x block [b][width]).
void attend_range(const float* const* qs, const float* cache, int64_t j0, int64_t j1, int heads, int width,
                  float scale, float* m, float* l, float* o) {
  std::fill(m, m + heads, -std::numeric_limits<float>::infinity());
  std::fill(l, l + heads, 0.0f);
  std::fill(o, o + static_cast<int64_t>(heads) * width, 0.0f);
  std::vector<float> ct(static_cast<size_t>(width) * kBlock), s(static_cast<size_t>(heads) * kBlock);
  for (int64_t b0 = j0; b0 < j1; b0 += kBlock) {
    const int64_t b = std::min(kBlock, j1 - b0);
    const float* blk = cache + b0 * width;
    for (int64_t j = 0; j < b; ++j)  // ct[c][j] = blk[j][c]
      for (int c = 0; c < width; ++c) ct[c * b + j] = blk[j * width + c];
    // s[h][j] = sum over slices of q[h][slice] . ct[slice][j]  (each slice of ct stays in L1)
    for (int c0 = 0, i = 0; c0 < width; c0 += kSlice, ++i)
      gemm_nn(qs[i], &ct[static_cast<size_t>(c0) * b], s.data(), heads, std::min(kSlice, width - c0), b, c0 > 0);
    for (int h = 0; h < heads; ++h) {
      float* sh = &s[static_cast<size_t>(h) * b];
      float mx = m[h];
      for (int64_t j = 0; j < b; ++j) mx = std::max(mx, sh[j] * scale);
      const float correction = exp_nonpos(m[h] - mx);  // 0 on the first block (m = -inf)
      float sum = 0.0f;
      for (int64_t j = 0; j < b; ++j) {
        const float p = exp_nonpos(sh[j] * scale - mx);
        sh[j] = p;
        sum += p;
      }
      l[h] = l[h] * correction + sum;
      m[h] = mx;
      if (correction != 1.0f) {
        float* oh = o + static_cast<int64_t>(h) * width;
        for (int c = 0; c < width; ++c) oh[c] *= correction;
      }
    }
    gemm_nn(s.data(), blk, o, heads, b, width, true);  // o[h][:] += p[h] . block
  }
}

}  // namespace

void mla_decode_attention(const float* q, const float* cache, int64_t n, int heads, int lora, int rope, float scale,
                          float* o_lat) {
  const int width = lora + rope;
  const int64_t rows = mla_detail::task_rows(n), tasks = std::max<int64_t>(1, (n + rows - 1) / rows);
  // q split into contiguous [heads][kSlice] slices (the A operands of the score products).
  const int nslices = (width + kSlice - 1) / kSlice;
  std::vector<std::vector<float>> qslice(nslices);
  std::vector<const float*> qs(nslices);
  for (int i = 0; i < nslices; ++i) {
    const int c0 = i * kSlice, w = std::min(kSlice, width - c0);
    qslice[i].resize(static_cast<size_t>(heads) * w);
    for (int h = 0; h < heads; ++h)
      std::copy_n(q + static_cast<int64_t>(h) * width + c0, w, &qslice[i][static_cast<size_t>(h) * w]);
    qs[i] = qslice[i].data();
  }
  const int64_t ld_task = static_cast<int64_t>(heads) * width;
  std::vector<float> ml(static_cast<size_t>(tasks) * 2 * heads), os(static_cast<size_t>(tasks * ld_task));
  auto one = [&](int64_t t, int) {
    attend_range(qs.data(), cache, t * rows, std::min(n, (t + 1) * rows), heads,
                 width, scale, &ml[t * 2 * heads], &ml[t * 2 * heads + heads], &os[t * ld_task]);
  };
  if (tasks == 1) one(0, 0);
  else global_pool().run(tasks, one);
  mla_detail::merge_tasks(ml.data(), ml.data() + heads, 2 * heads, os.data(), ld_task, width, tasks, heads, lora,
                          o_lat);
}

void mla_decode_attention(const float* q, const uint16_t* cache_bf16, int64_t n, int heads, int lora, int rope,
                          float scale, float* o_lat) {
  std::vector<float> cache(static_cast<size_t>(n) * (lora + rope));
  for (size_t i = 0; i < cache.size(); ++i) cache[i] = bf16_to_f32(cache_bf16[i]);
  mla_decode_attention(q, cache.data(), n, heads, lora, rope, scale, o_lat);
}

}  // namespace portable
}  // namespace k3
