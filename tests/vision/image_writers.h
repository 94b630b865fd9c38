// Test-only image writers built on libpng / libjpeg, so every decoder test generates its own
// inputs (no binary blobs): PNGs of any colour type and depth, JPEGs with an optional EXIF
// Orientation, and hand-made PNG headers for malformed-file tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace k3::testing {

using Bytes = std::vector<uint8_t>;

struct PngSpec {
  int width = 0, height = 0;
  int color_type = 2;  // PNG_COLOR_TYPE_* (0 gray, 2 RGB, 3 palette, 4 gray+alpha, 6 RGBA)
  int bit_depth = 8;
  bool interlaced = false;
  // Samples row-major, one value per channel (palette: indices), each < 2^bit_depth.
  std::vector<uint16_t> samples;
  std::vector<uint8_t> palette_rgb;    // 3 bytes per entry
  std::vector<uint8_t> palette_alpha;  // tRNS for palette images (may be shorter than the palette)
};

Bytes encode_png(const PngSpec& spec);

// 8-bit RGB pixels (w*h*3), quality 95, and an APP1 EXIF block with this orientation when > 0.
Bytes encode_jpeg(int width, int height, const std::vector<uint8_t>& rgb, int orientation = 0,
                  bool big_endian_exif = false);

// The same pixels as a progressive JPEG (libjpeg's simple progression: 10 scans), or a
// sequential one with a restart marker after every `restart_interval` MCUs (0: none).
Bytes encode_jpeg_progressive(int width, int height, const std::vector<uint8_t>& rgb);
Bytes encode_jpeg_with_restarts(int width, int height, const std::vector<uint8_t>& rgb, int restart_interval);

// A PNG signature + IHDR chunk (correct CRC) announcing width x height, then IEND: enough for a
// decoder to read the header.
Bytes png_header_only(uint32_t width, uint32_t height);

}  // namespace k3::testing
