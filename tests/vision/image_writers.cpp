#include "image_writers.h"

#include <cstdio>  // before jpeglib.h, which needs FILE and size_t
#include <cstdlib>

#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

namespace k3::testing {
namespace {

void write_cb(png_structp png, png_bytep data, size_t n) {
  auto* out = static_cast<Bytes*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}

int channels_of(int color_type) {
  switch (color_type) {
    case PNG_COLOR_TYPE_GRAY: return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA: return 2;
    case PNG_COLOR_TYPE_RGB: return 3;
    case PNG_COLOR_TYPE_RGB_ALPHA: return 4;
    default: return 1;  // palette indices
  }
}

void put_u32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

void put_chunk(Bytes& out, const char* type, const Bytes& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  Bytes body(type, type + 4);
  body.insert(body.end(), data.begin(), data.end());
  out.insert(out.end(), body.begin(), body.end());
  put_u32(out, static_cast<uint32_t>(crc32(0, body.data(), static_cast<uInt>(body.size()))));
}

}  // namespace

// libpng's default error handler (abort) is acceptable here: the tests only write valid images.
Bytes encode_png(const PngSpec& s) {
  Bytes out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &out, write_cb, nullptr);
  png_set_IHDR(png, info, s.width, s.height, s.bit_depth, s.color_type,
               s.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  std::vector<png_color> pal;
  for (size_t i = 0; i + 2 < s.palette_rgb.size(); i += 3)
    pal.push_back({s.palette_rgb[i], s.palette_rgb[i + 1], s.palette_rgb[i + 2]});
  if (!pal.empty()) png_set_PLTE(png, info, pal.data(), static_cast<int>(pal.size()));
  if (!s.palette_alpha.empty())
    png_set_tRNS(png, info, s.palette_alpha.data(), static_cast<int>(s.palette_alpha.size()), nullptr);
  png_write_info(png, info);
  // Pack samples into rows: bytes for 8/16-bit, bits (MSB first) below 8.
  const int ch = channels_of(s.color_type);
  const size_t row_bytes = (static_cast<size_t>(s.width) * ch * s.bit_depth + 7) / 8;
  std::vector<Bytes> rows(s.height, Bytes(row_bytes, 0));
  for (int y = 0; y < s.height; ++y)
    for (int i = 0; i < s.width * ch; ++i) {
      const uint16_t v = s.samples[static_cast<size_t>(y) * s.width * ch + i];
      if (s.bit_depth == 16) {
        rows[y][2 * i] = static_cast<uint8_t>(v >> 8);
        rows[y][2 * i + 1] = static_cast<uint8_t>(v);
      } else if (s.bit_depth == 8) {
        rows[y][i] = static_cast<uint8_t>(v);
      } else {
        const int bit = i * s.bit_depth;
        rows[y][bit / 8] |= static_cast<uint8_t>(v << (8 - s.bit_depth - bit % 8));
      }
    }
  std::vector<png_bytep> ptrs;
  for (Bytes& r : rows) ptrs.push_back(r.data());
  png_write_image(png, ptrs.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

namespace {

Bytes encode_jpeg_impl(int width, int height, const std::vector<uint8_t>& rgb, int orientation, bool big_endian_exif,
                       bool progressive, int restart_interval) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = width;
  c.image_height = height;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 95, TRUE);
  if (progressive) jpeg_simple_progression(&c);
  c.restart_interval = static_cast<unsigned>(restart_interval);
  jpeg_start_compress(&c, TRUE);
  if (orientation > 0) {
    // "Exif\0\0" + TIFF header + IFD0 with one entry: Orientation (0x0112), SHORT, count 1.
    const bool be = big_endian_exif;
    Bytes e = {'E', 'x', 'i', 'f', 0, 0};
    auto u16 = [&](uint16_t v) {
      e.push_back(static_cast<uint8_t>(be ? v >> 8 : v));
      e.push_back(static_cast<uint8_t>(be ? v : v >> 8));
    };
    auto u32 = [&](uint32_t v) {
      if (be) {
        u16(static_cast<uint16_t>(v >> 16));
        u16(static_cast<uint16_t>(v));
      } else {
        u16(static_cast<uint16_t>(v));
        u16(static_cast<uint16_t>(v >> 16));
      }
    };
    e.push_back(be ? 'M' : 'I');
    e.push_back(be ? 'M' : 'I');
    u16(42);
    u32(8);       // IFD0 offset
    u16(2);       // two entries: an unrelated tag first, then Orientation
    u16(0x010f);  // Make, ASCII, count 4, inline "k3\0\0"
    u16(2);
    u32(4);
    e.insert(e.end(), {'k', '3', 0, 0});
    u16(0x0112);
    u16(3);
    u32(1);
    u16(static_cast<uint16_t>(orientation));
    u16(0);
    u32(0);  // no next IFD
    jpeg_write_marker(&c, JPEG_APP0 + 1, e.data(), static_cast<unsigned>(e.size()));
  }
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(&rgb[static_cast<size_t>(c.next_scanline) * width * 3]);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  Bytes out(buf, buf + size);
  jpeg_destroy_compress(&c);
  free(buf);
  return out;
}

}  // namespace

Bytes encode_jpeg(int width, int height, const std::vector<uint8_t>& rgb, int orientation, bool big_endian_exif) {
  return encode_jpeg_impl(width, height, rgb, orientation, big_endian_exif, false, 0);
}

Bytes encode_jpeg_progressive(int width, int height, const std::vector<uint8_t>& rgb) {
  return encode_jpeg_impl(width, height, rgb, 0, false, true, 0);
}

Bytes encode_jpeg_with_restarts(int width, int height, const std::vector<uint8_t>& rgb, int restart_interval) {
  return encode_jpeg_impl(width, height, rgb, 0, false, false, restart_interval);
}

Bytes png_header_only(uint32_t width, uint32_t height) {
  Bytes out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  Bytes ihdr;
  put_u32(ihdr, width);
  put_u32(ihdr, height);
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit RGB, deflate, adaptive filter, no interlace
  put_chunk(out, "IHDR", ihdr);
  put_chunk(out, "IEND", {});
  return out;
}

}  // namespace k3::testing
