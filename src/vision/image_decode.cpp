#include "vision/image_decode.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "io/read_fd.h"

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

// stat() first, then read at most max_bytes + 1: a tellg() size check would see 0 bytes for
// /dev/zero (which would then be read until memory ran out) and a huge size for a directory.
Image load_image_file(const std::string& path, const DecodeOptions& options) {
  const ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));  // a FIFO must not block the open
  if (fd.get() < 0) fail(path, ": cannot open image file: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail(path, ": cannot stat image file: ", std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail(path, ": is a directory, not an image file");
  if (!S_ISREG(st.st_mode)) fail(path, ": is not a regular file (expected a PNG or JPEG image file)");
  if (static_cast<uint64_t>(st.st_size) > options.max_bytes)
    fail(path, ": image file is ", static_cast<uint64_t>(st.st_size), " bytes, over the limit of ", options.max_bytes);
  // The stat size is only a hint (the file may grow while read): the cap is enforced on the bytes read.
  const std::string bytes = read_fd(fd.get(), path + ": read error", options.max_bytes, static_cast<uint64_t>(st.st_size));
  if (bytes.size() > options.max_bytes) fail(path, ": image file is over the limit of ", options.max_bytes, " bytes");
  return decode_image(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), path, options);
}

}  // namespace k3
