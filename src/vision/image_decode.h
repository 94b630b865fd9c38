// Decoding uploaded images (PNG and JPEG) from memory or from a file into an 8-bit RGB / RGBA
// k3::Image, through the system libpng and libjpeg(-turbo).
//
//   PNG:  RGB, RGBA, palette (tRNS becomes alpha), gray, gray+alpha, 1/2/4/8/16-bit, interlaced.
//         16-bit samples keep their high byte (as PIL does for 16-bit RGB).  Gray becomes RGB.
//         Gamma/colour chunks are ignored, as PIL ignores them.
//   JPEG: gray, YCbCr/RGB and (Adobe) CMYK; the EXIF Orientation tag is applied, so width and
//         height are those of the upright image.
//
// Every failure is a k3::Error naming the source: empty input, an unknown format, a corrupt or
// truncated stream, and images whose header announces more than DecodeOptions::max_pixels
// (checked before any pixel is decoded, so a decompression bomb costs nothing).  The libraries'
// error callbacks never abort the process.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "vision/image.h"

namespace k3 {

struct DecodeOptions {
  uint64_t max_pixels = 64ull << 20;  // width * height limit (64 Mpixel)
  int max_side = 1 << 16;             // per-side limit in pixels
  uint64_t max_bytes = 256ull << 20;  // encoded size limit
};

enum class ImageFormat { kUnknown, kPng, kJpeg };

// Sniffs the magic bytes.
ImageFormat detect_image_format(std::span<const uint8_t> bytes);

// `source` names the image in errors (a file name, "image_url 2", ...).
Image decode_image(std::span<const uint8_t> bytes, const std::string& source, const DecodeOptions& options = {});
// Only a regular file is read (a directory, device or FIFO is refused by name), and never more
// than options.max_bytes + 1 bytes of it.
Image load_image_file(const std::string& path, const DecodeOptions& options = {});

// The codecs themselves (image_decode_png.cpp, image_decode_jpeg.cpp).
Image decode_png(std::span<const uint8_t> bytes, const std::string& source, const DecodeOptions& options);
Image decode_jpeg(std::span<const uint8_t> bytes, const std::string& source, const DecodeOptions& options);

// Throws unless width x height is a decodable size under `options`.
void check_image_size(uint64_t width, uint64_t height, const std::string& source, const DecodeOptions& options);

}  // namespace k3
