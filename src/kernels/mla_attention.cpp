#include "kernels/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/linear.h"

namespace k3 {

void mla_decode_attention(const float* q, const float* cache, int64_t n, int heads, int lora, int rope, float scale,
                          float* o_lat) {
  const int width = lora + rope;
  constexpr int64_t kBlock = 128;
  const Matrix qm{WeightFormat::kF32, heads, width, q, nullptr};
  std::vector<float> m(heads, -std::numeric_limits<float>::infinity()), l(heads, 0.0f);
  std::vector<float> s(kBlock * heads), pt(heads * kBlock), ct(static_cast<size_t>(lora) * kBlock),
      part(static_cast<size_t>(lora) * heads);
  std::fill(o_lat, o_lat + static_cast<int64_t>(heads) * lora, 0.0f);
  for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
    const int64_t b = std::min(kBlock, n - j0);
    const float* blk = cache + j0 * width;
    linear(qm, blk, b, s.data());  // s[j][h]
    for (int h = 0; h < heads; ++h) {
      float mx = m[h];
      for (int64_t j = 0; j < b; ++j) mx = std::fmax(mx, s[j * heads + h] * scale);
      const float correction = std::exp(m[h] - mx);  // 0 on the first block (m = -inf)
      float sum = 0.0f;
      for (int64_t j = 0; j < b; ++j) {
        const float p = std::exp(s[j * heads + h] * scale - mx);
        pt[h * b + j] = p;
        sum += p;
      }
      l[h] = l[h] * correction + sum;
      m[h] = mx;
      float* o = o_lat + static_cast<int64_t>(h) * lora;
      for (int c = 0; c < lora; ++c) o[c] *= correction;
    }
    // ct[c][j] = blk[j][c]: the block transposed so the value product is another linear().
    for (int64_t j = 0; j < b; ++j)
      for (int c = 0; c < lora; ++c) ct[c * b + j] = blk[j * width + c];
    const Matrix pm{WeightFormat::kF32, heads, b, pt.data(), nullptr};
    linear(pm, ct.data(), lora, part.data());  // part[c][h]
    for (int h = 0; h < heads; ++h) {
      float* o = o_lat + static_cast<int64_t>(h) * lora;
      for (int c = 0; c < lora; ++c) o[c] += part[static_cast<int64_t>(c) * heads + h];
    }
  }
  for (int h = 0; h < heads; ++h) {
    const float inv = 1.0f / l[h];
    float* o = o_lat + static_cast<int64_t>(h) * lora;
    for (int c = 0; c < lora; ++c) o[c] *= inv;
  }
}

}  // namespace k3
