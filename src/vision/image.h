// A decoded 8-bit image as the vision preprocessor consumes it: interleaved RGB (3 channels) or
// RGBA (4 channels, straight alpha), rows top to bottom.  Every decoder in this folder produces
// one of these two layouts, whatever the file stored (palette, gray, 16-bit ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace k3 {

struct Image {
  int width = 0;
  int height = 0;
  int channels = 3;             // 3 = RGB, 4 = RGBA
  std::vector<uint8_t> pixels;  // width * height * channels bytes

  Image() = default;
  Image(int w, int h, int c) : width(w), height(h), channels(c), pixels(static_cast<size_t>(w) * h * c) {}

  bool has_alpha() const { return channels == 4; }
  uint8_t* at(int x, int y) { return pixels.data() + (static_cast<size_t>(y) * width + x) * channels; }
  const uint8_t* at(int x, int y) const { return pixels.data() + (static_cast<size_t>(y) * width + x) * channels; }
};

// Applies an EXIF Orientation value (1..8, TIFF tag 0x0112) so the result is upright, the way
// PIL's ImageOps.exif_transpose does (2 mirror, 3 rotate 180, 4 flip, 5 transpose, 6 rotate 90
// clockwise, 7 transverse, 8 rotate 90 counter-clockwise).  1 and unknown values are a no-op.
Image apply_exif_orientation(Image image, int orientation);

}  // namespace k3
