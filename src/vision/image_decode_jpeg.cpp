// JPEG through libjpeg(-turbo).  libjpeg reports fatal errors through error_exit, which must
// not return: it longjmps back into the two small functions below that hold no C++ object with
// a destructor.  Warnings are ignored (as PIL ignores them) except those that mean lost image
// data, which libjpeg would otherwise paper over with grey blocks: a premature end of the file
// or of a scan's data (a truncated file, or one cut short before its EOI marker: a 2 KB file
// whose header says 8000x8000 "decoded" to 64 Mpixel of grey), a bad Huffman or arithmetic
// code, a lost restart marker.  A progressive (or multi-scan) file may have at most
// kMaxScans scans: each scan is a pass over the whole coefficient buffer, so a few bytes per
// repeated scan could otherwise buy minutes of decoding.
#include <csetjmp>
#include <cstdio>  // before jpeglib.h, which needs FILE and size_t
#include <cstring>
#include <vector>

#include <jpeglib.h>  // first: its jconfig.h decides which codes jerror.h declares

#include <jerror.h>

#include "base/error.h"
#include "vision/exif.h"
#include "vision/image_decode.h"

namespace k3 {
namespace {

// libjpeg-turbo's own tools have the same guard (djpeg -maxscans, TJPARAM_SCANLIMIT); real
// encoders write about ten scans.
constexpr int kMaxScans = 500;

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void error_exit_cb(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegError*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

// The warnings that mean part of the image was never decoded.
bool is_data_loss(int msg_code) {
  switch (msg_code) {
    case JWRN_JPEG_EOF:       // premature end of JPEG file
    case JWRN_HIT_MARKER:     // premature end of data segment
    case JWRN_HUFF_BAD_CODE:  // bad Huffman code
#if defined(D_ARITH_CODING_SUPPORTED)
    case JWRN_ARITH_BAD_CODE:  // bad arithmetic code
#endif
    case JWRN_MUST_RESYNC:  // found marker ... instead of RSTn
      return true;
    default: return false;
  }
}

void emit_message_cb(j_common_ptr c, int level) {
  if (level < 0 && is_data_loss(c->err->msg_code)) error_exit_cb(c);
  if (level < 0) c->err->num_warnings++;
}

// Called by libjpeg while it reads the scans of a multi-scan file.
void progress_cb(j_common_ptr c) {
  if (!c->is_decompressor) return;
  const int scan = reinterpret_cast<j_decompress_ptr>(c)->input_scan_number;
  if (scan <= kMaxScans) return;
  auto* e = reinterpret_cast<JpegError*>(c->err);
  std::snprintf(e->message, sizeof e->message,
                "more than %d scans (refusing a possible decoding-time bomb; real files have about 10)", kMaxScans);
  std::longjmp(e->jump, 1);
}

struct JpegHeader {
  unsigned width = 0, height = 0;
  int components = 0;
  bool cmyk = false;
  bool adobe_inverted = false;
  const uint8_t* exif = nullptr;  // APP1 payload (owned by libjpeg until destroy)
  size_t exif_size = 0;
};

bool read_header(jpeg_decompress_struct* cinfo, jpeg_progress_mgr* progress, const uint8_t* data, size_t size,
                 JpegHeader* h) {
  JpegError* e = reinterpret_cast<JpegError*>(cinfo->err);
  if (setjmp(e->jump)) return false;
  jpeg_create_decompress(cinfo);  // may fail too (allocation), so inside the setjmp scope
  cinfo->progress = progress;      // after the create, which clears it
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_save_markers(cinfo, JPEG_APP0 + 1, 0xffff);
  jpeg_read_header(cinfo, TRUE);
  h->cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  h->adobe_inverted = h->cmyk && cinfo->saw_Adobe_marker;
  cinfo->out_color_space = h->cmyk ? JCS_CMYK : JCS_RGB;
  jpeg_calc_output_dimensions(cinfo);
  h->width = cinfo->output_width;
  h->height = cinfo->output_height;
  h->components = cinfo->output_components;
  for (jpeg_saved_marker_ptr m = cinfo->marker_list; m != nullptr; m = m->next) {
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && std::memcmp(m->data, "Exif\0\0", 6) == 0) {
      h->exif = m->data;
      h->exif_size = m->data_length;
      break;
    }
  }
  return true;
}

bool read_pixels(jpeg_decompress_struct* cinfo, uint8_t* out, size_t row_bytes) {
  JpegError* e = reinterpret_cast<JpegError*>(cinfo->err);
  if (setjmp(e->jump)) return false;
  jpeg_start_decompress(cinfo);
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = out + cinfo->output_scanline * row_bytes;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

class JpegDecompress {
 public:
  JpegDecompress() {
    cinfo_.err = jpeg_std_error(&err_.mgr);
    err_.mgr.error_exit = error_exit_cb;
    err_.mgr.emit_message = emit_message_cb;
    err_.message[0] = '\0';
    progress_.progress_monitor = progress_cb;
  }
  // Safe before jpeg_create_decompress too: it only releases what cinfo_.mem holds.
  ~JpegDecompress() { jpeg_destroy_decompress(&cinfo_); }
  JpegDecompress(const JpegDecompress&) = delete;
  JpegDecompress& operator=(const JpegDecompress&) = delete;
  jpeg_decompress_struct* cinfo() { return &cinfo_; }
  jpeg_progress_mgr* progress() { return &progress_; }
  const char* message() const { return err_.message; }

 private:
  jpeg_decompress_struct cinfo_{};
  JpegError err_{};
  jpeg_progress_mgr progress_{};
};

inline uint8_t muldiv255(int a, int b) {
  const int t = a * b + 128;
  return static_cast<uint8_t>(((t >> 8) + t) >> 8);
}

// PIL's CMYK -> RGB: r = (255 - k) - (c * (255 - k)) / 255, rounded.
Image cmyk_to_rgb(const std::vector<uint8_t>& cmyk, int w, int h, bool inverted) {
  Image img(w, h, 3);
  const size_t n = static_cast<size_t>(w) * h;
  for (size_t i = 0; i < n; ++i) {
    uint8_t v[4];
    for (int c = 0; c < 4; ++c) v[c] = inverted ? 255 - cmyk[i * 4 + c] : cmyk[i * 4 + c];
    const int nk = 255 - v[3];
    for (int c = 0; c < 3; ++c) img.pixels[i * 3 + c] = static_cast<uint8_t>(nk - muldiv255(v[c], nk));
  }
  return img;
}

}  // namespace

Image decode_jpeg(std::span<const uint8_t> bytes, const std::string& source, const DecodeOptions& options) {
  JpegDecompress d;
  JpegHeader h;
  if (!read_header(d.cinfo(), d.progress(), bytes.data(), bytes.size(), &h))
    fail(source, ": invalid JPEG: ", d.message());
  check_image_size(h.width, h.height, source, options);
  const int want = h.cmyk ? 4 : 3;
  K3_CHECK(h.components == want, source, ": unsupported JPEG colour layout (", h.components, " components)");
  const int orientation = h.exif != nullptr ? exif_orientation({h.exif, h.exif_size}) : 0;

  std::vector<uint8_t> buf(static_cast<size_t>(h.width) * h.height * want);
  if (!read_pixels(d.cinfo(), buf.data(), static_cast<size_t>(h.width) * want))
    fail(source, ": corrupt or truncated JPEG: ", d.message());
  Image img;
  if (h.cmyk) {
    img = cmyk_to_rgb(buf, static_cast<int>(h.width), static_cast<int>(h.height), h.adobe_inverted);
  } else {
    img.width = static_cast<int>(h.width);
    img.height = static_cast<int>(h.height);
    img.channels = 3;
    img.pixels = std::move(buf);
  }
  return apply_exif_orientation(std::move(img), orientation);
}

}  // namespace k3
