#include "vision/exif.h"

#include <cstring>

namespace k3 {
namespace {

class TiffReader {
 public:
  TiffReader(std::span<const uint8_t> tiff, bool big_endian) : t_(tiff), be_(big_endian) {}
  bool has(uint64_t off, uint64_t n) const { return off <= t_.size() && n <= t_.size() - off; }
  uint32_t u16(uint64_t off) const { return be_ ? (t_[off] << 8) | t_[off + 1] : t_[off] | (t_[off + 1] << 8); }
  uint32_t u32(uint64_t off) const { return be_ ? (u16(off) << 16) | u16(off + 2) : u16(off) | (u16(off + 2) << 16); }

 private:
  std::span<const uint8_t> t_;
  bool be_;
};

}  // namespace

int exif_orientation(std::span<const uint8_t> app1) {
  static const uint8_t kHeader[6] = {'E', 'x', 'i', 'f', 0, 0};
  if (app1.size() < 6 + 8 || std::memcmp(app1.data(), kHeader, 6) != 0) return 0;
  const std::span<const uint8_t> tiff = app1.subspan(6);
  bool big_endian;
  if (tiff[0] == 'I' && tiff[1] == 'I')
    big_endian = false;
  else if (tiff[0] == 'M' && tiff[1] == 'M')
    big_endian = true;
  else
    return 0;
  const TiffReader r(tiff, big_endian);
  if (r.u16(2) != 42) return 0;
  const uint64_t ifd = r.u32(4);
  if (!r.has(ifd, 2)) return 0;
  const uint32_t entries = r.u16(ifd);
  for (uint32_t i = 0; i < entries; ++i) {
    const uint64_t e = ifd + 2 + 12ull * i;
    if (!r.has(e, 12)) return 0;
    if (r.u16(e) != 0x0112) continue;
    // Type SHORT (3), count 1: the value sits in the first two bytes of the value field.
    if (r.u16(e + 2) != 3 || r.u32(e + 4) < 1) return 0;
    const uint32_t v = r.u16(e + 8);
    return v >= 1 && v <= 8 ? static_cast<int>(v) : 0;
  }
  return 0;
}

}  // namespace k3
