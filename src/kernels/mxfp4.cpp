#include "kernels/mxfp4.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace k3 {

const float kE2M1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

void mxfp4_dequant_row(const uint8_t* packed_row, const uint8_t* scale_row, int64_t cols, float* out) {
  for (int64_t c = 0; c < cols; c += 2) {
    const uint8_t byte = packed_row[c / 2];
    const float s = e8m0_to_f32(scale_row[c / 32]);
    out[c] = kE2M1Values[byte & 0xf] * s;
    out[c + 1] = kE2M1Values[byte >> 4] * s;
  }
}

namespace {

// Nearest E2M1 magnitude code for |x| (already divided by the scale), ties to even code.
uint8_t e2m1_code(float a) {
  static const float mags[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  if (!(a < 6.0f)) return 7;  // saturate (also catches +inf)
  uint8_t best = 0;
  for (uint8_t c = 1; c < 8; ++c) {
    const float mid = 0.5f * (mags[c - 1] + mags[c]);
    if (a > mid || (a == mid && (c % 2) == 0)) best = c;
  }
  return best;
}

}  // namespace

void mxfp4_quant_row(const float* row, int64_t cols, uint8_t* packed_row, uint8_t* scale_row) {
  for (int64_t g = 0; g < cols; g += 32) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(row[g + i]));
    int e = 127;  // scale 1.0 for an all-zero group
    if (amax > 0.0f) {
      e = static_cast<int>(std::floor(std::log2(amax))) - 2 + 127;
      if (e < 0) e = 0;
      if (e > 254) e = 254;
    }
    scale_row[g / 32] = static_cast<uint8_t>(e);
    const float inv = 1.0f / e8m0_to_f32(static_cast<uint8_t>(e));
    for (int i = 0; i < 32; i += 2) {
      uint8_t codes[2];
      for (int j = 0; j < 2; ++j) {
        const float x = row[g + i + j] * inv;
        codes[j] = static_cast<uint8_t>(e2m1_code(std::fabs(x)) | (std::signbit(x) ? 8 : 0));
      }
      packed_row[(g + i) / 2] = static_cast<uint8_t>(codes[0] | (codes[1] << 4));
    }
  }
}

Mxfp4ScaleScan scan_mxfp4_scales(const uint8_t* scales, size_t n) {
  // memchr twice per 256 KB block: the second search reads the block from L2, so the scan costs
  // about one pass at memchr's speed (far faster than an 8-bytes-at-a-time loop).
  constexpr size_t kBlock = size_t{256} << 10;
  Mxfp4ScaleScan out;
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t len = std::min(kBlock, n - b);
    const auto* nan = static_cast<const uint8_t*>(std::memchr(scales + b, 0xFF, len));
    const size_t before = nan == nullptr ? len : static_cast<size_t>(nan - (scales + b));
    if (!out.has_zero) out.has_zero = std::memchr(scales + b, 0x00, before) != nullptr;
    if (nan != nullptr) {
      out.first_nan = static_cast<int64_t>(nan - scales);
      return out;
    }
  }
  return out;
}

}  // namespace k3
