// Image decoding (vision/image_decode.h): the input is an uploaded file's bytes, PNG or JPEG
// (the EXIF orientation of a JPEG included), decoded as the server decodes an image_url, with a
// pixel limit of 1 Mpixel so one input never costs more than a few milliseconds.
// Properties: decode_image returns or throws k3::Error (libpng / libjpeg errors included, which
// must never abort the process); a decoded image has a sniffed format, a size within the limits,
// 3 or 4 channels and exactly width x height x channels bytes.
#include <span>

#include "base/error.h"
#include "fuzz_support.h"
#include "vision/image_decode.h"

using namespace k3;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  DecodeOptions options;
  options.max_pixels = 1 << 20;
  const std::span<const uint8_t> bytes(data, size);
  Image image;
  try {
    image = decode_image(bytes, "image_url 1", options);
  } catch (const Error&) {
    return 0;
  }
  K3_FUZZ_ASSERT(detect_image_format(bytes) != ImageFormat::kUnknown, "decoded an image of no known format");
  K3_FUZZ_ASSERT(image.width > 0 && image.height > 0 && image.width <= options.max_side &&
                     image.height <= options.max_side &&
                     static_cast<uint64_t>(image.width) * static_cast<uint64_t>(image.height) <= options.max_pixels,
                 "decoded a ", image.width, " x ", image.height, " image");
  K3_FUZZ_ASSERT(image.channels == 3 || image.channels == 4, "decoded ", image.channels, " channels");
  K3_FUZZ_ASSERT(image.pixels.size() == static_cast<size_t>(image.width) * image.height * image.channels,
                 "decoded ", image.pixels.size(), " bytes for ", image.width, " x ", image.height, " x ",
                 image.channels);
  return 0;
}
