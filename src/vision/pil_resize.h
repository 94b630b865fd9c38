// Bicubic resizing bit-exact with Pillow's Image.resize(size, Image.Resampling.BICUBIC) on 8-bit
// images (the released K3 processor resizes with PIL, whose bicubic differs from PyTorch's):
//   - separable: a horizontal pass, then a vertical pass; a pass whose size does not change is
//     skipped, and an unchanged size returns a copy;
//   - cubic kernel a = -0.5 whose support widens by the scale when downscaling (antialiasing),
//     taps centred at (i + 0.5) * scale, window bounds rounded, weights normalised to sum 1;
//   - weights in 22-bit fixed point, each pass rounded and clipped to uint8;
//   - RGBA is resized premultiplied (RGBa): c' = MULDIV255(c, a), all four channels resampled,
//     then c = min(255, 255 * c' / a) except where a is 0 or 255.
#pragma once

#include "vision/image.h"

namespace k3 {

Image pil_resize_bicubic(const Image& src, int out_width, int out_height);

}  // namespace k3
