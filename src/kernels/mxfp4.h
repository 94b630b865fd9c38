// MXFP4 (OCP microscaling FP4) as Kimi K3 stores its routed experts:
//   W[r,c] = E2M1(nibble(r,c)) * 2^(scale[r, c/32] - 127)
// E2M1 codes 0..7 = {0, .5, 1, 1.5, 2, 3, 4, 6}, 8..15 the negatives (8 = -0).  E8M0 0xFF is NaN
// and is rejected when a checkpoint loads (scan_mxfp4_scales); 0x00 is 2^-127.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/matrix.h"

namespace k3 {

extern const float kE2M1Values[16];

// 2^(e - 127) as a float (e = 0 gives the subnormal 2^-127).  e must not be 0xFF.
inline float e8m0_to_f32(uint8_t e) {
  const uint32_t bits = e == 0 ? 0x00400000u : static_cast<uint32_t>(e) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Dequantises row r's `cols` values (cols a multiple of 32).
void mxfp4_dequant_row(const uint8_t* packed_row, const uint8_t* scale_row, int64_t cols, float* out);

// Quantises one row with the OCP rule (shared exponent floor(log2 amax) - 2, round to nearest
// even on the E2M1 grid, saturate at 6).  Used by the synthetic-checkpoint writer and tests.
void mxfp4_quant_row(const float* row, int64_t cols, uint8_t* packed_row, uint8_t* scale_row);

// A scan of E8M0 scale bytes: the index of the first 0xFF (NaN, invalid), or -1; and
// whether any byte is 0x00 (the subnormal 2^-127, which the vector kernels decode on a slower
// path; Matrix::scales_zero_free records its absence).
struct Mxfp4ScaleScan {
  int64_t first_nan = -1;
  bool has_zero = false;
};
Mxfp4ScaleScan scan_mxfp4_scales(const uint8_t* scales, size_t n);

// Whether rows [r, r + rn) of an MXFP4 matrix have a 0x00 scale byte: false at once when the
// matrix is marked zero-free, else a search of those rows' scales.
inline bool mxfp4_rows_have_zero_scale(const Matrix& m, int64_t r, int64_t rn) {
  if (m.scales_zero_free) return false;
  const int64_t sb = m.cols / 32;
  return std::memchr(m.scales + r * sb, 0, static_cast<size_t>(rn * sb)) != nullptr;
}

}  // namespace k3
