// The released K3 image preprocessing (tests/data/fixtures/vision-tiny-a/README.md, "Resolved
// choices"), from a decoded image to the tower's input:
//   1. navit_resize_image: one scale s = min(1, sqrt(in_patch_limit / (max(1, w//14) *
//      max(1, h//14))), 512*14/w, 512*14/h); new side = min(max(1, int(side * s)), 512*14);
//   2. PIL bicubic resize to that size (pil_resize.h; RGBA premultiplied);
//   3. images with alpha composited on the chessboard (after the resize, as released):
//      out = uint8(trunc(a*rgb + (1-a)*bg)), a = alpha/255 in float32;
//   4. zero padding right/bottom to multiples of patch*merge (28);
//   5. x/255, then (x - mean) / std per channel, in float32;
//   6. patchify to [N, 3, 14, 14] in (t, row, col) order, channel-major inside a patch.
// grid_thw = (1, padded_h/14, padded_w/14); the image becomes (grid_h/2)(grid_w/2) LM tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "vision/image.h"
#include "vision/media_config.h"

namespace k3 {

struct GridThw {
  int t = 1, h = 0, w = 0;  // frames and patch rows / columns
  int64_t patches() const { return static_cast<int64_t>(t) * h * w; }
};

struct NavitGeometry {
  int resized_width = 0, resized_height = 0;
  int pad_width = 0, pad_height = 0;
  GridThw grid;
  int64_t num_tokens = 0;  // (grid.h / merge) * (grid.w / merge)
};

// Step 1 plus padding and the grid, for an image of width x height (both >= 1).
NavitGeometry navit_resize_geometry(int width, int height, const MediaProcConfig& cfg);

// Step 3 on its own: an RGB copy of an RGBA image over the chessboard (RGB passes through).
Image composite_on_chessboard(const Image& image, const MediaProcConfig& cfg);

struct PreprocessedImage {
  int width = 0, height = 0;  // the original upload size (the prompt's "image {W}x{H}")
  NavitGeometry geometry;
  std::vector<float> pixel_values;  // [geometry.grid.patches(), 3, patch, patch]

  const GridThw& grid() const { return geometry.grid; }
  int64_t num_tokens() const { return geometry.num_tokens; }
};

// Steps 1-6.
PreprocessedImage preprocess_image(const Image& image, const MediaProcConfig& cfg);

}  // namespace k3
