#include "kernels/mla_attention.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/small_gemm.h"

namespace k3 {
namespace {

constexpr int64_t kBlock = 64;         // cache rows per block: a 64-row panel of 128 columns fits L1
constexpr int kSlice = 64;             // score products run over 64-wide slices of the latent
constexpr int64_t kTaskTokens = 1024;  // cache rows per task (fixed: results do not depend on threads)

// e^x for x <= 0 (Cephes' polynomial after n = round(x log2 e); 0 below the normal range).
// Branch-free so the compiler vectorises the loop that calls it.
inline float exp_nonpos(float x) {
  const float xc = std::max(x, -87.0f);
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  const float p2 = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < -87.0f ? 0.0f : y * p2;
}

struct Partial {
  std::vector<float> m, l, o;  // per head: running max, sum, unnormalised output [H][width]
};

// Online softmax over cache rows [j0, j1) for all heads; each block of rows is read once for all
// heads (scores: q [H][width] x block^T, values: p [H][b] x block [b][width]).
void attend_range(const float* const* qs, const float* cache, int64_t j0, int64_t j1, int heads, int width,
                  float scale, Partial& part) {
  part.m.assign(heads, -std::numeric_limits<float>::infinity());
  part.l.assign(heads, 0.0f);
  part.o.assign(static_cast<size_t>(heads) * width, 0.0f);
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
      float mx = part.m[h];
      for (int64_t j = 0; j < b; ++j) mx = std::max(mx, sh[j] * scale);
      const float correction = exp_nonpos(part.m[h] - mx);  // 0 on the first block (m = -inf)
      float sum = 0.0f;
      for (int64_t j = 0; j < b; ++j) {
        const float p = exp_nonpos(sh[j] * scale - mx);
        sh[j] = p;
        sum += p;
      }
      part.l[h] = part.l[h] * correction + sum;
      part.m[h] = mx;
      if (correction != 1.0f) {
        float* o = &part.o[static_cast<size_t>(h) * width];
        for (int c = 0; c < width; ++c) o[c] *= correction;
      }
    }
    gemm_nn(s.data(), blk, part.o.data(), heads, b, width, true);  // o[h][:] += p[h] . block
  }
}

}  // namespace

void mla_decode_attention(const float* q, const float* cache, int64_t n, int heads, int lora, int rope, float scale,
                          float* o_lat) {
  const int width = lora + rope;
  const int64_t tasks = std::max<int64_t>(1, (n + kTaskTokens - 1) / kTaskTokens);
  std::vector<Partial> parts(tasks);
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
  auto one = [&](int64_t t, int) {
    attend_range(qs.data(), cache, t * kTaskTokens, std::min(n, (t + 1) * kTaskTokens), heads, width, scale, parts[t]);
  };
  if (tasks == 1) one(0, 0);
  else global_pool().run(tasks, one);
  // Merge the tasks' partial softmaxes in task order (flash-decoding).
  for (int h = 0; h < heads; ++h) {
    float mx = -std::numeric_limits<float>::infinity();
    for (const Partial& p : parts) mx = std::max(mx, p.m[h]);
    float* o = o_lat + static_cast<int64_t>(h) * lora;
    std::fill(o, o + lora, 0.0f);
    float l = 0.0f;
    for (const Partial& p : parts) {
      const float w = std::exp(p.m[h] - mx);
      l += w * p.l[h];
      const float* po = &p.o[static_cast<size_t>(h) * width];
      for (int c = 0; c < lora; ++c) o[c] += w * po[c];
    }
    const float inv = 1.0f / l;
    for (int c = 0; c < lora; ++c) o[c] *= inv;
  }
}

}  // namespace k3
