// PNG through libpng's progressive-free read API.  libpng reports errors by longjmp; the two
// functions that call setjmp hold no C++ object with a destructor, so nothing is skipped when
// it fires, and every message is turned into a k3::Error afterwards.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "vision/image_decode.h"

namespace k3 {
namespace {

struct PngSource {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  char message[512] = {};
  char warning[200] = {};  // the first warning: libpng often explains an error in one
};

void read_cb(png_structp png, png_bytep out, size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) png_error(png, "truncated data (unexpected end of file)");
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

void error_cb(png_structp png, png_const_charp msg) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  if (src->warning[0] != '\0')
    std::snprintf(src->message, sizeof src->message, "%s (%s)", msg, src->warning);
  else
    std::snprintf(src->message, sizeof src->message, "%s", msg);
  png_longjmp(png, 1);
}

void warning_cb(png_structp png, png_const_charp msg) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  if (src->warning[0] == '\0') std::snprintf(src->warning, sizeof src->warning, "%s", msg);
}

struct PngHeader {
  png_uint_32 width = 0, height = 0;
  int channels = 0;
  size_t rowbytes = 0;
};

// Reads the header and sets the transforms to 8-bit RGB / RGBA.  False on a libpng error.
bool read_header(png_structp png, png_infop info, PngHeader* h) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  if (depth == 16) png_set_strip_16(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  h->width = png_get_image_width(png, info);
  h->height = png_get_image_height(png, info);
  h->channels = png_get_channels(png, info);
  h->rowbytes = png_get_rowbytes(png, info);
  return true;
}

bool read_pixels(png_structp png, png_infop info, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  png_read_end(png, nullptr);
  return true;
}

class PngReadStruct {
 public:
  explicit PngReadStruct(PngSource* src) {
    png_ = png_create_read_struct(PNG_LIBPNG_VER_STRING, src, error_cb, warning_cb);
    if (png_ != nullptr) info_ = png_create_info_struct(png_);
  }
  ~PngReadStruct() { png_destroy_read_struct(&png_, info_ != nullptr ? &info_ : nullptr, nullptr); }
  PngReadStruct(const PngReadStruct&) = delete;
  PngReadStruct& operator=(const PngReadStruct&) = delete;
  png_structp png() const { return png_; }
  png_infop info() const { return info_; }

 private:
  png_structp png_ = nullptr;
  png_infop info_ = nullptr;
};

}  // namespace

Image decode_png(std::span<const uint8_t> bytes, const std::string& source, const DecodeOptions& options) {
  // The size check comes first, straight from the IHDR chunk (signature, length, "IHDR", width,
  // height): libpng would read every chunk up to the first IDAT before reporting the size.
  if (bytes.size() >= 24 && std::memcmp(bytes.data() + 12, "IHDR", 4) == 0) {
    const auto be32 = [&](size_t o) {
      return uint64_t{bytes[o]} << 24 | uint64_t{bytes[o + 1]} << 16 | uint64_t{bytes[o + 2]} << 8 | bytes[o + 3];
    };
    check_image_size(be32(16), be32(20), source, options);
  }
  PngSource src;
  src.data = bytes.data();
  src.size = bytes.size();
  PngReadStruct s(&src);
  K3_CHECK(s.png() != nullptr && s.info() != nullptr, source, ": cannot initialise libpng");
  png_set_read_fn(s.png(), &src, read_cb);
  // Only IHDR, PLTE, tRNS, IDAT and IEND matter here (gamma and colour chunks are ignored, as
  // PIL ignores them): every other chunk is skipped unparsed.  libpng would otherwise inflate
  // each zTXt / iTXt text (up to 8 MB apiece, a thousand of them): an 8 MB file holding a 4x4
  // image behind text chunks would take most of a minute to decode.
  png_set_keep_unknown_chunks(s.png(), PNG_HANDLE_CHUNK_NEVER, nullptr, -1);

  PngHeader h;
  if (!read_header(s.png(), s.info(), &h)) fail(source, ": invalid PNG: ", src.message);
  check_image_size(h.width, h.height, source, options);
  K3_CHECK((h.channels == 3 || h.channels == 4) && h.rowbytes == static_cast<size_t>(h.width) * h.channels, source,
           ": unsupported PNG layout (", h.channels, " channels)");

  Image img(static_cast<int>(h.width), static_cast<int>(h.height), h.channels);
  std::vector<png_bytep> rows(h.height);
  for (png_uint_32 y = 0; y < h.height; ++y) rows[y] = img.pixels.data() + y * h.rowbytes;
  if (!read_pixels(s.png(), s.info(), rows.data())) fail(source, ": corrupt PNG: ", src.message);
  return img;
}

}  // namespace k3
