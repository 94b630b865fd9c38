#include "vision/image_decode.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "base/error.h"

namespace k3 {

ImageFormat detect_image_format(std::span<const uint8_t> bytes) {
  static const uint8_t kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPngMagic, 8) == 0) return ImageFormat::kPng;
  if (bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff) return ImageFormat::kJpeg;
  return ImageFormat::kUnknown;
}

void check_image_size(uint64_t width, uint64_t height, const std::string& source, const DecodeOptions& options) {
  K3_CHECK(width > 0 && height > 0, source, ": image has zero size (", width, "x", height, ")");
  K3_CHECK(width <= static_cast<uint64_t>(options.max_side) && height <= static_cast<uint64_t>(options.max_side),
           source, ": image is ", width, "x", height, " pixels; the largest side accepted is ", options.max_side);
  K3_CHECK(width * height <= options.max_pixels, source, ": image is ", width, "x", height, " = ", width * height,
           " pixels, over the limit of ", options.max_pixels, " (refusing a possible decompression bomb)");
}

Image decode_image(std::span<const uint8_t> bytes, const std::string& source, const DecodeOptions& options) {
  K3_CHECK(!bytes.empty(), source, ": empty image (0 bytes)");
  K3_CHECK(bytes.size() <= options.max_bytes, source, ": image file is ", bytes.size(), " bytes, over the limit of ",
           options.max_bytes);
  switch (detect_image_format(bytes)) {
    case ImageFormat::kPng: return decode_png(bytes, source, options);
    case ImageFormat::kJpeg: return decode_jpeg(bytes, source, options);
    case ImageFormat::kUnknown: break;
  }
  fail(source, ": not a PNG or JPEG image (unrecognised signature)");
}

Image load_image_file(const std::string& path, const DecodeOptions& options) {
  std::ifstream in(path, std::ios::binary);
  K3_CHECK(in.is_open(), path, ": cannot open image file");
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(std::max<std::streamoff>(0, in.tellg()));
  K3_CHECK(size <= options.max_bytes, path, ": image file is ", size, " bytes, over the limit of ", options.max_bytes);
  in.seekg(0, std::ios::beg);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  K3_CHECK(!in.bad(), path, ": read error");
  return decode_image(bytes, path, options);
}

}  // namespace k3
