#include "vision/image.h"

#include <cstring>

namespace k3 {

Image apply_exif_orientation(Image image, int orientation) {
  if (orientation < 2 || orientation > 8) return image;
  const int W = image.width, H = image.height, C = image.channels;
  const bool swap = orientation >= 5;  // the transposing orientations swap width and height
  Image out(swap ? H : W, swap ? W : H, C);
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      int sx = x, sy = y;  // source pixel of out(x, y)
      switch (orientation) {
        case 2: sx = W - 1 - x; break;  // mirror left-right
        case 3:
          sx = W - 1 - x;
          sy = H - 1 - y;
          break;                        // rotate 180
        case 4: sy = H - 1 - y; break;  // flip top-bottom
        case 5:
          sx = y;
          sy = x;
          break;  // transpose
        case 6:
          sx = y;
          sy = H - 1 - x;
          break;  // rotate 90 clockwise
        case 7:
          sx = W - 1 - y;
          sy = H - 1 - x;
          break;  // transverse
        case 8:
          sx = W - 1 - y;
          sy = x;
          break;  // rotate 90 counter-clockwise
      }
      std::memcpy(out.at(x, y), image.at(sx, sy), static_cast<size_t>(C));
    }
  }
  return out;
}

}  // namespace k3
