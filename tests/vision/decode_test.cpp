// Image decoding: every PNG colour type / depth and JPEG with EXIF orientation decode to the
// expected 8-bit RGB / RGBA pixels; malformed input of every kind is a clear k3::Error.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>

#include <zlib.h>

#include "base/error.h"
#include "image_writers.h"
#include "support/test_support.h"
#include "vision/exif.h"
#include "vision/image_decode.h"
#include "vision_fixture.h"

namespace k3 {
namespace {

using testing::Bytes;
using testing::PngSpec;

// Deterministic sample values in [0, 2^depth).
std::vector<uint16_t> pattern(size_t n, int depth, uint32_t salt) {
  std::vector<uint16_t> v(n);
  uint32_t s = 2166136261u ^ salt;
  for (size_t i = 0; i < n; ++i) {
    s = (s ^ static_cast<uint32_t>(i)) * 16777619u;
    v[i] = static_cast<uint16_t>((s >> 7) & ((1u << depth) - 1));
  }
  return v;
}

// Expands a `depth`-bit sample to 8 bits the way libpng / PIL do (bit replication for gray < 8,
// high byte for 16).
uint8_t to8(uint16_t v, int depth) {
  if (depth == 16) return static_cast<uint8_t>(v >> 8);
  if (depth == 8) return static_cast<uint8_t>(v);
  return static_cast<uint8_t>(v * 255 / ((1 << depth) - 1));
}

TEST(PngDecode, GrayAndRgbOfEveryDepth) {
  struct Case {
    int color, depth, channels;
  };
  for (const Case c : {Case{0, 1, 1}, Case{0, 2, 1}, Case{0, 4, 1}, Case{0, 8, 1}, Case{0, 16, 1}, Case{2, 8, 3},
                       Case{2, 16, 3}, Case{4, 8, 2}, Case{4, 16, 2}, Case{6, 8, 4}, Case{6, 16, 4}}) {
    for (bool interlaced : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "color " << c.color << " depth " << c.depth << " interlaced " << interlaced);
      PngSpec s;
      s.width = 13;
      s.height = 7;
      s.color_type = c.color;
      s.bit_depth = c.depth;
      s.interlaced = interlaced;
      s.samples = pattern(static_cast<size_t>(s.width) * s.height * c.channels, c.depth, c.color * 100 + c.depth);
      const Image img = decode_image(testing::encode_png(s), "test.png");
      const bool alpha = c.color == 4 || c.color == 6;
      ASSERT_EQ(img.width, 13);
      ASSERT_EQ(img.height, 7);
      ASSERT_EQ(img.channels, alpha ? 4 : 3);
      for (int i = 0; i < 13 * 7; ++i) {
        const uint16_t* px = &s.samples[static_cast<size_t>(i) * c.channels];
        const bool gray = c.channels <= 2;
        for (int k = 0; k < 3; ++k) ASSERT_EQ(img.pixels[i * img.channels + k], to8(px[gray ? 0 : k], c.depth));
        if (alpha) {
          ASSERT_EQ(img.pixels[i * 4 + 3], to8(px[c.channels - 1], c.depth));
        }
      }
    }
  }
}

TEST(PngDecode, PaletteWithAndWithoutTransparency) {
  PngSpec s;
  s.width = 9;
  s.height = 5;
  s.color_type = 3;
  s.bit_depth = 4;
  for (int i = 0; i < 16; ++i)
    s.palette_rgb.insert(s.palette_rgb.end(), {uint8_t(i * 16), uint8_t(255 - i), uint8_t(i * 7)});
  s.samples = pattern(45, 4, 3);
  Image img = decode_image(testing::encode_png(s), "p.png");
  ASSERT_EQ(img.channels, 3);
  for (int i = 0; i < 45; ++i)
    for (int k = 0; k < 3; ++k) ASSERT_EQ(img.pixels[i * 3 + k], s.palette_rgb[s.samples[i] * 3 + k]);

  s.palette_alpha = {0, 50, 100, 150};  // entries 4.. are opaque
  img = decode_image(testing::encode_png(s), "p.png");
  ASSERT_EQ(img.channels, 4);
  for (int i = 0; i < 45; ++i) {
    const int idx = s.samples[i];
    for (int k = 0; k < 3; ++k) ASSERT_EQ(img.pixels[i * 4 + k], s.palette_rgb[idx * 3 + k]);
    ASSERT_EQ(img.pixels[i * 4 + 3], idx < 4 ? s.palette_alpha[idx] : 255);
  }
}

// A 32x16 JPEG with four solid quadrants; the decoder must turn it upright.
TEST(JpegDecode, AppliesEveryExifOrientation) {
  const int W = 32, H = 16;
  const uint8_t colors[4][3] = {{220, 30, 30}, {30, 200, 40}, {40, 40, 210}, {230, 220, 40}};  // TL TR BL BR
  std::vector<uint8_t> rgb(W * H * 3);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)
      for (int k = 0; k < 3; ++k) rgb[(y * W + x) * 3 + k] = colors[(y >= H / 2) * 2 + (x >= W / 2)][k];
  // Where each stored quadrant ends up (TL, TR, BL, BR of the upright image) per orientation.
  const int upright[9][4] = {{0, 1, 2, 3}, {0, 1, 2, 3}, {1, 0, 3, 2}, {3, 2, 1, 0}, {2, 3, 0, 1},
                             {0, 2, 1, 3}, {2, 0, 3, 1}, {3, 1, 2, 0}, {1, 3, 0, 2}};
  for (bool be : {false, true})
    for (int o = 0; o <= 8; ++o) {
      SCOPED_TRACE(::testing::Message() << "orientation " << o << (be ? " big-endian" : " little-endian"));
      const Image img = decode_image(testing::encode_jpeg(W, H, rgb, o, be), "o.jpg");
      const bool swapped = o >= 5;
      ASSERT_EQ(img.width, swapped ? H : W);
      ASSERT_EQ(img.height, swapped ? W : H);
      ASSERT_EQ(img.channels, 3);
      for (int q = 0; q < 4; ++q) {
        // Centre of quadrant q of the upright image.
        const int x = (q % 2) * img.width / 2 + img.width / 4, y = (q / 2) * img.height / 2 + img.height / 4;
        for (int k = 0; k < 3; ++k)
          EXPECT_NEAR(img.at(x, y)[k], colors[upright[o][q]][k], 8) << "quadrant " << q << " channel " << k;
      }
    }
}

TEST(JpegDecode, ExifParserRejectsJunkQuietly) {
  const uint8_t not_exif[] = {'J', 'F', 'I', 'F', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0};
  EXPECT_EQ(exif_orientation(not_exif), 0);
  const uint8_t bad_offset[] = {'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 42, 0, 0xff, 0xff, 0, 0};
  EXPECT_EQ(exif_orientation(bad_offset), 0);
  const uint8_t many_entries[] = {'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8, 0xff, 0xff};
  EXPECT_EQ(exif_orientation(many_entries), 0);
}

TEST(MalformedImages, EachIsAClearError) {
  PngSpec s;
  s.width = 40;
  s.height = 30;
  s.samples = pattern(40 * 30 * 3, 8, 9);
  const Bytes png = testing::encode_png(s);
  std::vector<uint8_t> rgb(40 * 30 * 3, 128);
  const Bytes jpeg = testing::encode_jpeg(40, 30, rgb);

  EXPECT_NE(testing::error_message([] { decode_image({}, "empty.png"); }).find("empty.png: empty image"),
            std::string::npos);
  const std::string text = "hello, this is not an image";
  EXPECT_NE(testing::error_message([&] {
              decode_image({reinterpret_cast<const uint8_t*>(text.data()), text.size()}, "t.png");
            }).find("t.png: not a PNG or JPEG image"),
            std::string::npos);

  // Truncated: every cut inside the data fails cleanly.
  for (size_t cut : {size_t{8}, size_t{20}, png.size() / 2, png.size() - 13}) {
    const std::string m = testing::error_message([&] { decode_image({png.data(), cut}, "cut.png"); });
    EXPECT_NE(m.find("cut.png: "), std::string::npos) << m;
    EXPECT_NE(m.find("truncated"), std::string::npos) << "cut at " << cut << ": " << m;
  }
  for (size_t cut : {size_t{3}, size_t{100}, jpeg.size() / 2, jpeg.size() - 2}) {
    const std::string m = testing::error_message([&] { decode_image({jpeg.data(), cut}, "cut.jpg"); });
    EXPECT_NE(m.find("cut.jpg: "), std::string::npos) << m;
    EXPECT_NE(m.find("Premature end of JPEG file"), std::string::npos) << "cut at " << cut << ": " << m;
  }

  // Corrupt: a damaged IDAT (CRC), a garbage stream after the JPEG signature.
  Bytes bad = png;
  bad[bad.size() / 2] ^= 0x55;
  EXPECT_NE(testing::error_message([&] { decode_image(bad, "crc.png"); }).find("crc.png: corrupt PNG"),
            std::string::npos);
  Bytes junk = {0xff, 0xd8, 0xff};
  for (int i = 0; i < 200; ++i) junk.push_back(static_cast<uint8_t>(i * 37));
  EXPECT_NE(testing::error_message([&] { decode_image(junk, "junk.jpg"); }).find("junk.jpg: invalid JPEG"),
            std::string::npos);

  // Zero size: IHDR with a zero width or height.
  EXPECT_NE(testing::error_message([] {
              decode_image(testing::png_header_only(0, 10), "zero.png");
            }).find("zero.png: image has zero size (0x10)"),
            std::string::npos);
  EXPECT_NE(testing::error_message([] { decode_image(testing::png_header_only(7, 0), "zero.png"); }).find("zero size"),
            std::string::npos);

  // Decompression bombs: refused from the header alone.
  const std::string bomb =
      testing::error_message([] { decode_image(testing::png_header_only(60000, 60000), "bomb.png"); });
  EXPECT_NE(bomb.find("bomb.png: image is 60000x60000 = 3600000000 pixels, over the limit"), std::string::npos) << bomb;
  Bytes jbomb = jpeg;  // patch the SOF0 frame size to 60000 x 60000
  for (size_t i = 0; i + 8 < jbomb.size(); ++i)
    if (jbomb[i] == 0xff && jbomb[i + 1] == 0xc0) {
      jbomb[i + 5] = jbomb[i + 7] = 60000 >> 8;
      jbomb[i + 6] = jbomb[i + 8] = 60000 & 0xff;
      break;
    }
  EXPECT_NE(testing::error_message([&] { decode_image(jbomb, "bomb.jpg"); }).find("over the limit"), std::string::npos);
  DecodeOptions small;
  small.max_pixels = 1000;
  EXPECT_NE(
      testing::error_message([&] { decode_image(png, "big.png", small); }).find("1200 pixels, over the limit of 1000"),
      std::string::npos);
  small.max_bytes = 10;
  EXPECT_NE(testing::error_message([&] { decode_image(png, "big.png", small); }).find("over the limit of 10"),
            std::string::npos);

  EXPECT_NE(testing::error_message([] { load_image_file("/nonexistent/x.png"); }).find("cannot open"),
            std::string::npos);
}

// A PNG chunk (length, type, data, CRC).
Bytes png_chunk(const char* type, const Bytes& data) {
  Bytes c;
  c.reserve(12 + data.size());
  const auto put32 = [&c](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) c.push_back(static_cast<uint8_t>(v >> shift));
  };
  put32(static_cast<uint32_t>(data.size()));
  for (int i = 0; i < 4; ++i) c.push_back(static_cast<uint8_t>(type[i]));
  c.insert(c.end(), data.begin(), data.end());
  put32(static_cast<uint32_t>(crc32(0, c.data() + 4, static_cast<uInt>(4 + data.size()))));
  return c;
}

// Chunks other than IHDR, PLTE, tRNS, IDAT and IEND are skipped unparsed.  libpng would otherwise
// inflate every zTXt / iTXt (up to 8 MB of text each, a thousand of them): an 8 MB file with a
// 4x4 image behind 1100 such chunks would take most of a minute to decode.  Observable here: a
// broken text chunk does not reach libpng's warnings (which an error message quotes).
TEST(PngDecode, TextChunksAreSkippedUnparsed) {
  PngSpec s;
  s.width = 8;
  s.height = 8;
  s.samples = pattern(8 * 8 * 3, 8, 4);
  const Bytes png = testing::encode_png(s);
  const size_t after_ihdr = 8 + 12 + 13;
  Bytes text = {'k', 0, 0};  // keyword "k", compression method 0, then a zlib stream
  const Bytes zeros(1 << 20, 0);
  uLongf zlen = compressBound(static_cast<uLong>(zeros.size()));
  Bytes z(zlen);
  ASSERT_EQ(compress(z.data(), &zlen, zeros.data(), static_cast<uLong>(zeros.size())), Z_OK);
  z.resize(zlen);
  Bytes bomb = text;  // 1 MB of text in about 1 KB
  bomb.insert(bomb.end(), z.begin(), z.end());
  Bytes junk = text;  // not a zlib stream at all
  junk.insert(junk.end(), {1, 2, 3, 4, 5, 6, 7, 8});
  Bytes with = png;
  for (const Bytes& chunk : {png_chunk("zTXt", bomb), png_chunk("zTXt", junk), png_chunk("iTXt", junk)})
    with.insert(with.begin() + static_cast<std::ptrdiff_t>(after_ihdr), chunk.begin(), chunk.end());

  const Image a = decode_image(png, "a.png"), b = decode_image(with, "a.png");
  EXPECT_EQ(a.pixels, b.pixels);
  // The same damage (a bad IDAT CRC) gives the same message with or without the text chunks.
  Bytes bad = png, bad_with = with;
  bad[bad.size() - 14] ^= 0x55;  // the IDAT CRC
  bad_with[bad_with.size() - 14] ^= 0x55;
  const std::string m = testing::error_message([&] { decode_image(bad, "a.png"); });
  EXPECT_NE(m.find("a.png: corrupt PNG"), std::string::npos) << m;
  EXPECT_EQ(testing::error_message([&] { decode_image(bad_with, "a.png"); }), m);
}

// Whether j[i] starts a marker that ends entropy-coded data (not a stuffed 0xff, not an RSTn).
bool ends_scan_data(const Bytes& j, size_t i) {
  return j[i] == 0xff && j[i + 1] != 0 && (j[i + 1] < 0xd0 || j[i + 1] > 0xd7);
}

// Offsets of the SOS markers of a JPEG and of the EOI, walking the marker segments.
struct JpegScans {
  std::vector<size_t> sos;  // each scan runs from sos[i] to the next marker segment
  size_t eoi = 0;
};
JpegScans find_scans(const Bytes& j) {
  JpegScans out;
  size_t i = 2;
  while (i + 2 <= j.size() && j[i] == 0xff) {
    const uint8_t m = j[i + 1];
    if (m == 0xd9) {
      out.eoi = i;
      break;
    }
    if (i + 4 > j.size()) break;
    size_t next = i + 2 + (size_t{j[i + 2]} << 8 | j[i + 3]);
    if (m == 0xda) {
      out.sos.push_back(i);
      while (next + 1 < j.size() && !ends_scan_data(j, next)) ++next;
    }
    i = next;
  }
  return out;
}

std::vector<uint8_t> noisy_rgb(int w, int h) {
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>((i * 7919) >> 3);
  return rgb;
}

// Scan data that stops early but is followed by a proper EOI used to "decode": libjpeg warns
// ("premature end of data segment") and fills the rest with grey, so a 2 KB file whose header
// was patched to 8000x8000 came back as a 64-Mpixel image.  Lost data is an error now.
TEST(JpegDecode, ScanDataCutShortIsAnError) {
  const Bytes jpeg = testing::encode_jpeg(64, 48, noisy_rgb(64, 48));
  const JpegScans scans = find_scans(jpeg);
  ASSERT_EQ(scans.sos.size(), 1u);
  ASSERT_GT(scans.eoi, scans.sos[0]);
  Bytes cut(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(scans.sos[0] + (scans.eoi - scans.sos[0]) / 3));
  cut.insert(cut.end(), {0xff, 0xd9});
  std::string m = testing::error_message([&] { decode_image(cut, "cut.jpg"); });
  EXPECT_NE(m.find("cut.jpg: corrupt or truncated JPEG: Corrupt JPEG data: premature end of data segment"),
            std::string::npos)
      << m;

  Bytes big = jpeg;  // the same 64x48 data under a frame header announcing 8000 x 8000
  for (size_t i = 0; i + 8 < big.size(); ++i)
    if (big[i] == 0xff && big[i + 1] == 0xc0) {
      big[i + 5] = big[i + 7] = 8000 >> 8;
      big[i + 6] = big[i + 8] = 8000 & 0xff;
      break;
    }
  m = testing::error_message([&] { decode_image(big, "big.jpg"); });
  EXPECT_NE(m.find("big.jpg: corrupt or truncated JPEG: Corrupt JPEG data: premature end of data segment"),
            std::string::npos)
      << m;
}

// A damaged restart marker: libjpeg resynchronises and leaves the skipped blocks grey.
TEST(JpegDecode, LostRestartMarkerIsAnError) {
  const std::vector<uint8_t> rgb = noisy_rgb(64, 48);
  const Bytes jpeg = testing::encode_jpeg_with_restarts(64, 48, rgb, 1);
  const Image good = decode_image(jpeg, "rst.jpg");  // intact, it decodes
  EXPECT_EQ(good.width, 64);
  Bytes bad = jpeg;
  bool patched = false;
  for (size_t i = find_scans(jpeg).sos.at(0); i + 1 < bad.size() && !patched; ++i)
    if (bad[i] == 0xff && bad[i + 1] == 0xd3) {  // RST3 -> RST5
      bad[i + 1] = 0xd5;
      patched = true;
    }
  ASSERT_TRUE(patched);
  const std::string m = testing::error_message([&] { decode_image(bad, "rst.jpg"); });
  EXPECT_NE(m.find("rst.jpg: corrupt or truncated JPEG: Corrupt JPEG data: found marker 0xd5 instead of RST3"),
            std::string::npos)
      << m;
}

// Each scan of a progressive JPEG is a pass over the whole image: a small file repeating a
// few-byte scan thousands of times over a large image would decode for tens of seconds or
// more.  More than 500 scans is refused.
TEST(JpegDecode, TooManyScansIsAnError) {
  const std::vector<uint8_t> rgb(32 * 32 * 3, 128);  // flat: every repeated scan decodes cleanly
  const Bytes jpeg = testing::encode_jpeg_progressive(32, 32, rgb);
  const JpegScans scans = find_scans(jpeg);
  ASSERT_EQ(scans.sos.size(), 10u);
  const Image good = decode_image(jpeg, "prog.jpg");
  EXPECT_EQ(good.width, 32);
  // Repeat the last scan (with the tables in front of it) until there are 501 scans.
  const size_t prev_end = [&] {
    size_t e = scans.sos[8] + 2;
    while (!ends_scan_data(jpeg, e)) ++e;
    return e;
  }();
  const Bytes last(jpeg.begin() + static_cast<std::ptrdiff_t>(prev_end),
                   jpeg.begin() + static_cast<std::ptrdiff_t>(scans.eoi));
  Bytes many(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(scans.eoi));
  for (int i = 0; i < 491; ++i) many.insert(many.end(), last.begin(), last.end());
  many.insert(many.end(), {0xff, 0xd9});
  ASSERT_EQ(find_scans(many).sos.size(), 501u);
  const std::string m = testing::error_message([&] { decode_image(many, "scans.jpg"); });
  EXPECT_NE(m.find("scans.jpg: corrupt or truncated JPEG: more than 500 scans"), std::string::npos) << m;
  // 500 scans are still fine.
  many.resize(many.size() - 2 - last.size());
  many.insert(many.end(), {0xff, 0xd9});
  EXPECT_EQ(decode_image(many, "scans.jpg").width, 32);
}

// Deterministic random damage (byte changes and cuts) to valid files: each decode either succeeds
// with a consistent image (a damaged JPEG header may announce another size: it has no checksum)
// or throws k3::Error -- never crashes, hangs or throws anything else.
TEST(MalformedImages, RandomDamageIsAlwaysHandled) {
  PngSpec s;
  s.width = 24;
  s.height = 17;
  s.color_type = 6;
  s.interlaced = true;
  s.samples = pattern(24 * 17 * 4, 8, 5);
  std::vector<uint8_t> rgb(24 * 17 * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 13);
  uint32_t state = 12345;
  auto next = [&state] { return state = state * 1664525u + 1013904223u; };
  int errors = 0, decoded = 0;
  for (const Bytes& good : {testing::encode_png(s), testing::encode_jpeg(24, 17, rgb, 6)})
    for (int trial = 0; trial < 400; ++trial) {
      Bytes bad = good;
      for (int k = 0; k < 1 + trial % 4; ++k) bad[3 + next() % (bad.size() - 3)] = static_cast<uint8_t>(next() >> 24);
      if (trial % 5 == 0) bad.resize(3 + next() % (bad.size() - 3));
      try {
        const Image img = decode_image(bad, "fuzz");
        ASSERT_GT(img.width, 0);
        ASSERT_GT(img.height, 0);
        ASSERT_EQ(img.pixels.size(), static_cast<size_t>(img.width) * img.height * img.channels);
        ++decoded;
      } catch (const Error&) {
        ++errors;
      }
    }
  EXPECT_GT(errors, 0);
  std::printf("[ damage ] %d decoded, %d rejected\n", decoded, errors);
}

TEST(MalformedImages, FileRoundTrip) {
  testing::TempDir tmp;
  PngSpec s;
  s.width = 3;
  s.height = 2;
  s.samples = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18};
  const Bytes png = testing::encode_png(s);
  testing::write_file(tmp.file("a.png"), std::string(png.begin(), png.end()));
  const Image img = load_image_file(tmp.file("a.png"));
  ASSERT_EQ(img.pixels.size(), 18u);
  for (int i = 0; i < 18; ++i) EXPECT_EQ(img.pixels[i], i + 1);
  testing::write_file(tmp.file("empty.png"), "");
  EXPECT_NE(testing::error_message([&] { load_image_file(tmp.file("empty.png")); }).find("empty image"),
            std::string::npos);
}

// --image must name a regular file: a directory once reported "image file is
// 9223372036854775807 bytes" and /dev/zero was read until memory ran out (its size reads as 0).
TEST(MalformedImages, FileThatIsNotARegularFile) {
  testing::TempDir tmp;
  const std::string dir_err = testing::error_message([&] { load_image_file(tmp.path()); });
  EXPECT_NE(dir_err.find(tmp.path() + ": is a directory"), std::string::npos) << dir_err;
  const std::string zero_err = testing::error_message([] { load_image_file("/dev/zero"); });
  EXPECT_NE(zero_err.find("/dev/zero: is not a regular file"), std::string::npos) << zero_err;
  ASSERT_EQ(::mkfifo(tmp.file("pipe").c_str(), 0600), 0);
  const std::string fifo_err = testing::error_message([&] { load_image_file(tmp.file("pipe")); });
  EXPECT_NE(fifo_err.find("is not a regular file"), std::string::npos) << fifo_err;
  const std::string missing = testing::error_message([&] { load_image_file(tmp.file("none.png")); });
  EXPECT_NE(missing.find("cannot open image file: No such file or directory"), std::string::npos) << missing;
}

TEST(MalformedImages, FileOverTheByteLimit) {
  testing::TempDir tmp;
  testing::write_file(tmp.file("big.png"), std::string(200, 'x'));
  DecodeOptions small;
  small.max_bytes = 100;
  const std::string err = testing::error_message([&] { load_image_file(tmp.file("big.png"), small); });
  EXPECT_NE(err.find("200 bytes, over the limit of 100"), std::string::npos) << err;
}

}  // namespace
}  // namespace k3
