// MXFP4 decoding exactly as the OCP MX format and the K3 release define it, including the
// release's golden values.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/rng.h"
#include "kernels/linear.h"
#include "kernels/mxfp4.h"

namespace k3 {
namespace {

TEST(Mxfp4, E2M1Table) {
  const float want[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0f, -0.5, -1, -1.5, -2, -3, -4, -6};
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(kE2M1Values[i], want[i]) << i;
    EXPECT_EQ(std::signbit(kE2M1Values[i]), i >= 8) << i;
  }
}

TEST(Mxfp4, E8M0Scales) {
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(128), 2.0f);
  EXPECT_EQ(e8m0_to_f32(121), 1.0f / 64);
  EXPECT_EQ(e8m0_to_f32(254), std::ldexp(1.0f, 127));
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127));  // subnormal, not zero
  EXPECT_EQ(e8m0_to_f32(1), std::ldexp(1.0f, -126));
}

// layers.1...experts.0.w1 row 0 of the release: the first 16 dequantised values.  They are
// E2M1 codes times 2^-6 (E8M0 121); packing the codes low-nibble-first must give them back.
TEST(Mxfp4, ReleaseGoldenRow) {
  const float golden[16] = {0.0625,     0.0078125, -0.0078125, -0.0234375, -0.0625,   -0.03125,
                            0.0234375,  0.015625,  0.046875,   -0.0f,      -0.0234375, -0.015625,
                            -0.0234375, -0.0078125, 0.015625,  -0.015625};
  const uint8_t codes[16] = {6, 1, 9, 11, 14, 12, 3, 2, 5, 8, 11, 10, 11, 9, 2, 10};
  uint8_t packed[16] = {};
  for (int j = 0; j < 8; ++j) packed[j] = static_cast<uint8_t>(codes[2 * j] | (codes[2 * j + 1] << 4));
  for (int j = 8; j < 16; ++j) packed[j] = 0;  // the rest of the 32-group
  const uint8_t scale = 121;
  float out[32];
  mxfp4_dequant_row(packed, &scale, 32, out);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(out[i], golden[i]) << i;
    EXPECT_EQ(std::signbit(out[i]), std::signbit(golden[i])) << i;
  }
  // The same bytes through the matrix path (every ISA uses the shuffled layout).
  Matrix m{WeightFormat::kMxfp4, 1, 32, packed, &scale};
  float row[32];
  portable::dequant_row(m, 0, row);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(row[i], golden[i]);
}

TEST(Mxfp4, HighNibbleIsOddColumn) {
  const uint8_t packed[16] = {0x71};  // col 0 = code 1 (0.5), col 1 = code 7 (6)
  const uint8_t scale = 127;
  float out[32];
  mxfp4_dequant_row(packed, &scale, 32, out);
  EXPECT_EQ(out[0], 0.5f);
  EXPECT_EQ(out[1], 6.0f);
}

TEST(Mxfp4, QuantRoundTripIsExactOnGridValues) {
  Rng rng(1);
  for (int trial = 0; trial < 50; ++trial) {
    uint8_t packed[32], scales[2];
    for (auto& b : packed) b = static_cast<uint8_t>(rng.below(256));
    scales[0] = static_cast<uint8_t>(100 + rng.below(50));
    scales[1] = static_cast<uint8_t>(100 + rng.below(50));
    float vals[64];
    mxfp4_dequant_row(packed, scales, 64, vals);
    uint8_t p2[32], s2[2];
    mxfp4_quant_row(vals, 64, p2, s2);
    float back[64];
    mxfp4_dequant_row(p2, s2, 64, back);
    for (int i = 0; i < 64; ++i) EXPECT_EQ(back[i], vals[i]) << i;  // -0 may become +0: equal as floats
  }
}

TEST(Mxfp4, QuantSaturatesAndRoundsToEven) {
  float row[32] = {};
  row[0] = 6.0f;   // amax 6 -> exponent floor(log2 6) - 2 = 0 -> scale 1
  row[1] = 2.5f;   // halfway 2|3 -> even code (2)
  row[2] = 0.25f;  // halfway 0|0.5 -> 0
  row[3] = 5.0f;   // halfway 4|6 -> 4 (even code 6)
  row[4] = -1.25f; // halfway 1|1.5 -> 1 (even code 2)
  uint8_t packed[16], scale;
  mxfp4_quant_row(row, 32, packed, &scale);
  EXPECT_EQ(scale, 127);
  float out[32];
  mxfp4_dequant_row(packed, &scale, 32, out);
  EXPECT_EQ(out[0], 6.0f);
  EXPECT_EQ(out[1], 2.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 4.0f);
  EXPECT_EQ(out[4], -1.0f);
}

TEST(Mxfp4, ScanFindsNaNAndZeroScales) {
  uint8_t s[10] = {127, 1, 2, 0, 254, 3, 0xFF, 4, 5, 6};
  EXPECT_EQ(scan_mxfp4_scales(s, 10).first_nan, 6);
  EXPECT_EQ(scan_mxfp4_scales(s, 6).first_nan, -1);
  EXPECT_TRUE(scan_mxfp4_scales(s, 6).has_zero);
  EXPECT_FALSE(scan_mxfp4_scales(s, 3).has_zero);
  // Every position of a longer run (the 8-byte steps and the tail), and the bytes next to the
  // special values (0x01, 0xFE, 0x80), which a wrong borrow would report.
  for (size_t n : {7, 8, 9, 16, 23, 64, 67}) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i % 3 == 0 ? 0x01 : i % 3 == 1 ? 0xFE : 0x80);
    EXPECT_EQ(scan_mxfp4_scales(v.data(), n).first_nan, -1) << n;
    EXPECT_FALSE(scan_mxfp4_scales(v.data(), n).has_zero) << n;
    for (size_t at = 0; at < n; ++at) {
      std::vector<uint8_t> z = v, f = v, both = v;
      z[at] = 0x00;
      f[at] = 0xFF;
      both[at] = 0xFF;
      both[n - 1 - at] = at == n - 1 - at ? 0xFF : 0x00;
      EXPECT_TRUE(scan_mxfp4_scales(z.data(), n).has_zero) << n << " " << at;
      EXPECT_EQ(scan_mxfp4_scales(z.data(), n).first_nan, -1) << n << " " << at;
      EXPECT_FALSE(scan_mxfp4_scales(f.data(), n).has_zero) << n << " " << at;
      EXPECT_EQ(scan_mxfp4_scales(f.data(), n).first_nan, static_cast<int64_t>(at)) << n << " " << at;
      EXPECT_EQ(scan_mxfp4_scales(both.data(), n).first_nan, static_cast<int64_t>(at)) << n << " " << at;
    }
  }
}

// Scales longer than the scan's 256 KB block: a zero or a NaN in a later block is found.
TEST(Mxfp4, ScanCrossesBlocks) {
  std::vector<uint8_t> v(700000, 127);
  EXPECT_FALSE(scan_mxfp4_scales(v.data(), v.size()).has_zero);
  v[300001] = 0x00;
  EXPECT_TRUE(scan_mxfp4_scales(v.data(), v.size()).has_zero);
  EXPECT_EQ(scan_mxfp4_scales(v.data(), v.size()).first_nan, -1);
  v[600002] = 0xFF;
  EXPECT_EQ(scan_mxfp4_scales(v.data(), v.size()).first_nan, 600002);
  EXPECT_TRUE(scan_mxfp4_scales(v.data(), v.size()).has_zero);
}

// The per-tile question the vector kernels ask: answered by the search unless the matrix is
// marked zero-free.
TEST(Mxfp4, RowsHaveZeroScale) {
  std::vector<uint8_t> packed(4 * 64 / 2), scales(4 * 2, 127);
  scales[5] = 0;  // row 2, group 1
  Matrix m{WeightFormat::kMxfp4, 4, 64, packed.data(), scales.data()};
  EXPECT_FALSE(mxfp4_rows_have_zero_scale(m, 0, 2));
  EXPECT_TRUE(mxfp4_rows_have_zero_scale(m, 2, 1));
  EXPECT_TRUE(mxfp4_rows_have_zero_scale(m, 1, 3));
  EXPECT_FALSE(mxfp4_rows_have_zero_scale(m, 3, 1));
  m.scales_zero_free = true;
  EXPECT_FALSE(mxfp4_rows_have_zero_scale(m, 2, 1));
}

}  // namespace
}  // namespace k3
