#include "vision/pil_resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/error.h"

namespace k3 {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double bicubic_filter(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// Per output pixel: the first input tap, the tap count, and ksize fixed-point weights.
struct Coeffs {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> weights;
};

Coeffs precompute(int in_size, int out_size) {
  constexpr double support_1 = 2.0;  // bicubic support at scale 1
  const double scale = static_cast<double>(static_cast<float>(in_size)) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = support_1 * filterscale;
  Coeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.weights.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> k(c.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    const int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      k[x] = bicubic_filter((x + xmin - center + 0.5) * ss);
      ww += k[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double w = ww != 0.0 ? k[x] / ww : k[x];
      c.weights[static_cast<size_t>(xx) * c.ksize + x] =
          static_cast<int32_t>(w < 0 ? -0.5 + w * (1 << kPrecisionBits) : 0.5 + w * (1 << kPrecisionBits));
    }
    c.first[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

inline uint8_t clip8(int64_t v) {
  if (v >= (int64_t{1} << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

// One pass over interleaved 8-bit samples.  `horizontal` walks along rows, else along columns.
Image resample_pass(const Image& in, int out_size, bool horizontal) {
  const Coeffs c = precompute(horizontal ? in.width : in.height, out_size);
  Image out(horizontal ? out_size : in.width, horizontal ? in.height : out_size, in.channels);
  const int C = in.channels;
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      const int o = horizontal ? x : y;
      const int32_t* k = &c.weights[static_cast<size_t>(o) * c.ksize];
      for (int ch = 0; ch < C; ++ch) {
        int64_t ss = int64_t{1} << (kPrecisionBits - 1);
        for (int t = 0; t < c.count[o]; ++t) {
          const uint8_t* p = horizontal ? in.at(c.first[o] + t, y) : in.at(x, c.first[o] + t);
          ss += static_cast<int64_t>(p[ch]) * k[t];
        }
        out.at(x, y)[ch] = clip8(ss);
      }
    }
  }
  return out;
}

inline uint8_t muldiv255(unsigned a, unsigned b) {
  const unsigned t = a * b + 128;
  return static_cast<uint8_t>(((t >> 8) + t) >> 8);
}

}  // namespace

Image pil_resize_bicubic(const Image& src, int out_width, int out_height) {
  K3_CHECK(out_width > 0 && out_height > 0, "resize to an empty size ", out_width, "x", out_height);
  if (out_width == src.width && out_height == src.height) return src;
  Image img = src;
  const size_t n = static_cast<size_t>(img.width) * img.height;
  if (img.has_alpha())
    for (size_t i = 0; i < n; ++i) {
      uint8_t* p = &img.pixels[i * 4];
      for (int c = 0; c < 3; ++c) p[c] = muldiv255(p[c], p[3]);
    }
  if (out_width != img.width) img = resample_pass(img, out_width, true);
  if (out_height != img.height) img = resample_pass(img, out_height, false);
  if (img.has_alpha())
    for (size_t i = 0; i < static_cast<size_t>(out_width) * out_height; ++i) {
      uint8_t* p = &img.pixels[i * 4];
      const unsigned a = p[3];
      if (a == 0 || a == 255) continue;
      for (int c = 0; c < 3; ++c) p[c] = static_cast<uint8_t>(std::min(255u, 255u * p[c] / a));
    }
  return img;
}

}  // namespace k3
