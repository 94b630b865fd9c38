// The one EXIF field image decoding needs: the Orientation tag (0x0112) of IFD0, read from the
// payload of a JPEG APP1 segment ("Exif\0\0" + a TIFF structure, either byte order).
#pragma once

#include <cstdint>
#include <span>

namespace k3 {

// 1..8, or 0 when the payload is not EXIF, has no orientation, or is malformed (a broken EXIF
// block never rejects an image; every offset is bounds-checked).
int exif_orientation(std::span<const uint8_t> app1_payload);

}  // namespace k3
