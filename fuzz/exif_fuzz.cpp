// The EXIF Orientation reader (vision/exif.h): the input is the payload of a JPEG APP1 segment
// ("Exif\0\0" and a TIFF structure in either byte order).  Only k3::exif_orientation runs, so
// the fuzzer reaches deep into the IFD walk faster than through whole JPEGs (image_fuzz covers
// the way there).
// Property: the result is 0..8; a read outside the payload is an ASan report (libFuzzer passes
// each input in a buffer of exactly its size).
#include <span>

#include "fuzz_support.h"
#include "vision/exif.h"

using namespace k3;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int orientation = exif_orientation(std::span<const uint8_t>(data, size));
  K3_FUZZ_ASSERT(orientation >= 0 && orientation <= 8, "orientation ", orientation);
  return 0;
}
