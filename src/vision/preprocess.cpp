#include "vision/preprocess.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "vision/pil_resize.h"

namespace k3 {

NavitGeometry navit_resize_geometry(int width, int height, const MediaProcConfig& cfg) {
  K3_CHECK(width > 0 && height > 0, "image has zero size (", width, "x", height, ")");
  const int p = cfg.patch_size;
  const int max_side = cfg.patch_limit_on_one_side * p;
  // Python float arithmetic, operation for operation.
  const double patches = std::max(1.0, static_cast<double>(width / p)) * std::max(1.0, static_cast<double>(height / p));
  const double s1 = std::sqrt(static_cast<double>(cfg.in_patch_limit) / patches);
  const double s2 = static_cast<double>(max_side) / width;
  const double s3 = static_cast<double>(max_side) / height;
  const double s = std::min({1.0, s1, s2, s3});
  NavitGeometry g;
  g.resized_width = std::min(std::max(1, static_cast<int>(width * s)), max_side);
  g.resized_height = std::min(std::max(1, static_cast<int>(height * s)), max_side);
  const int f = cfg.pad_multiple();
  g.pad_width = (f - g.resized_width % f) % f;
  g.pad_height = (f - g.resized_height % f) % f;
  g.grid = {1, (g.resized_height + g.pad_height) / p, (g.resized_width + g.pad_width) / p};
  g.num_tokens = static_cast<int64_t>(g.grid.h / cfg.merge_kernel_size) * (g.grid.w / cfg.merge_kernel_size);
  return g;
}

Image composite_on_chessboard(const Image& image, const MediaProcConfig& cfg) {
  if (!image.has_alpha()) return image;
  Image out(image.width, image.height, 3);
  const int sq = cfg.chessboard_square_size;
  for (int y = 0; y < image.height; ++y)
    for (int x = 0; x < image.width; ++x) {
      const bool odd = ((x / sq + y / sq) % 2 == 1);
      const bool white = odd != cfg.chessboard_white_on_top_left;
      const float bg = static_cast<float>(white ? cfg.chessboard_white_value : cfg.chessboard_gray_value);
      const uint8_t* px = image.at(x, y);
      const float a = static_cast<float>(px[3]) / 255.0f;
      for (int c = 0; c < 3; ++c)
        out.at(x, y)[c] = static_cast<uint8_t>(a * static_cast<float>(px[c]) + (1.0f - a) * bg);
    }
  return out;
}

PreprocessedImage preprocess_image(const Image& image, const MediaProcConfig& cfg) {
  PreprocessedImage out;
  out.width = image.width;
  out.height = image.height;
  out.geometry = navit_resize_geometry(image.width, image.height, cfg);
  const NavitGeometry& g = out.geometry;
  Image rgb = cfg.fill_after_resize
                  ? composite_on_chessboard(pil_resize_bicubic(image, g.resized_width, g.resized_height), cfg)
                  : pil_resize_bicubic(composite_on_chessboard(image, cfg), g.resized_width, g.resized_height);

  const int p = cfg.patch_size;
  const int64_t patch_len = 3LL * p * p;
  out.pixel_values.assign(static_cast<size_t>(g.grid.patches() * patch_len), 0.0f);
  const auto normalise = [&cfg](uint8_t v, int c) {
    return (static_cast<float>(v) / 255.0f - cfg.image_mean[c]) / cfg.image_std[c];
  };
  for (int pr = 0; pr < g.grid.h; ++pr)
    for (int pc = 0; pc < g.grid.w; ++pc) {
      float* patch = &out.pixel_values[static_cast<size_t>((static_cast<int64_t>(pr) * g.grid.w + pc) * patch_len)];
      for (int c = 0; c < 3; ++c)
        for (int ky = 0; ky < p; ++ky)
          for (int kx = 0; kx < p; ++kx) {
            const int x = pc * p + kx, y = pr * p + ky;
            const bool inside = x < rgb.width && y < rgb.height;  // else zero padding
            patch[(c * p + ky) * p + kx] = normalise(inside ? rgb.at(x, y)[c] : 0, c);
          }
    }
  return out;
}

}  // namespace k3
