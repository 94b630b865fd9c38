// Fast linear kernels (AVX2, AVX-512) against the plain reference, for every weight format,
// over shapes that are and are not multiples of the vector width and row block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>

#include "base/error.h"
#include "base/numeric_types.h"
#include "kernels/kernel_test_util.h"
#include "kernels/linear.h"
#include "kernels/mxfp4.h"

namespace k3 {
namespace {

using testing::for_each_isa;
using testing::make_matrix;
using testing::random_vec;
using testing::TestMatrix;

// Plain fp64 product of the dequantised matrix, the ground truth for every implementation.
std::vector<double> exact_product(const Matrix& m, const std::vector<float>& x, int64_t n) {
  std::vector<double> y(n * m.rows);
  std::vector<float> row(m.cols);
  for (int64_t r = 0; r < m.rows; ++r) {
    portable::dequant_row(m, r, row.data());
    for (int64_t t = 0; t < n; ++t) {
      double acc = 0;
      for (int64_t c = 0; c < m.cols; ++c) acc += static_cast<double>(row[c]) * x[t * m.cols + c];
      y[t * m.rows + r] = acc;
    }
  }
  return y;
}

// Whether y is within the fp32 kernels' tolerance of want, the exact product over `cols` columns.
::testing::AssertionResult near_exact(const std::vector<float>& y, const std::vector<double>& want, int64_t cols) {
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  const double tol = 1e-5 * (scale + 1.0) * std::sqrt(static_cast<double>(cols));
  if (y.size() != want.size()) return ::testing::AssertionFailure() << y.size() << " values, want " << want.size();
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::fabs(y[i] - want[i]) <= tol))
      return ::testing::AssertionFailure() << "at " << i << ": " << y[i] << " vs " << want[i] << " (tolerance " << tol << ")";
  return ::testing::AssertionSuccess();
}

// Whether every token's product alone (the GEMV) is bit-identical to its values in `all`, the
// product of W with the n tokens of x in one call.
::testing::AssertionResult tokens_match_alone(const Matrix& m, const std::vector<float>& x, int64_t n,
                                              const std::vector<float>& all, Precision p = Precision::kF32) {
  std::vector<float> one(m.rows);
  for (int64_t tok = 0; tok < n; ++tok) {
    linear(m, x.data() + tok * m.cols, 1, one.data(), p);
    for (int64_t r = 0; r < m.rows; ++r)
      if (one[r] != all[tok * m.rows + r])
        return ::testing::AssertionFailure() << "token " << tok << " row " << r << ": " << one[r] << " alone, "
                                             << all[tok * m.rows + r] << " in the batch";
  }
  return ::testing::AssertionSuccess();
}

class LinearTest : public ::testing::TestWithParam<WeightFormat> {};

TEST_P(LinearTest, MatchesReferenceOverShapes) {
  const WeightFormat fmt = GetParam();
  Rng rng(7);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 32},   {3, 64},   {4, 96},    {5, 128},  {7, 160},
                                                           {9, 1},    {17, 15},  {13, 33},   {33, 257}, {64, 512},
                                                           {130, 96}, {11, 1000}, {6, 2048}, {2, 4096},
                                                           {21, 4224}, {5, 2400}, {1100, 48}};
  for (auto [rows, cols] : shapes) {
    if (fmt == WeightFormat::kMxfp4 && cols % 32 != 0) continue;
    for (int64_t n : {1, 2, 5, 19}) {
      if (n == 19 && rows * cols > 70000) continue;
      SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " n=" << n);
      TestMatrix t = make_matrix(fmt, rows, cols, rng);
      std::vector<float> x = random_vec(rng, n * cols);
      const std::vector<double> want = exact_product(t.m, x, n);
      for_each_isa([&](Isa) {
        std::vector<float> y(n * rows, -1.0f);
        linear(t.m, x.data(), n, y.data());
        ASSERT_TRUE(near_exact(y, want, cols));
      });
    }
  }
}

// A row's value must not depend on the batch it is computed in (continuous batching relies on it).
TEST_P(LinearTest, BatchInvariant) {
  const WeightFormat fmt = GetParam();
  Rng rng(11);
  // (rows, cols, n): small; several column blocks with a 32-group tail; many token tiles.
  // Dense only (cols % 32 != 0): column tails inside the GEMM path; more tokens than one block.
  for (auto [R, C, n] : {std::tuple<int64_t, int64_t, int64_t>{37, 320, 6}, {9, 2336, 11}, {13, 160, 37},
                         {7, 1037, 13}, {5, 2100, 53},
                         {1100, 160, 13},  // > 128 rows per pool task: several GEMM row blocks per task
                         {31, 544, 151},   // many token tiles; odd rows for the row tiles
                         {23, 200, 197},   // > 192 tokens: two GEMM token blocks; 23 = 3 x 6 + 5 rows
                         {19, 96, 2 * kTokenBlock + 37},  // linear_batch's token blocks, a partial last one
                         {5, 4224, 9}}) {  // > 4096 columns: the MXFP4 kernels' column blocks
    if (fmt == WeightFormat::kMxfp4 && C % 32 != 0) continue;
    SCOPED_TRACE(::testing::Message() << R << "x" << C << " n=" << n);
    TestMatrix t = make_matrix(fmt, R, C, rng);
    std::vector<float> x = random_vec(rng, n * C);
    for_each_isa([&](Isa) {
      std::vector<float> all(n * R);
      linear(t.m, x.data(), n, all.data());
      for (int64_t tok = 0; tok < n; ++tok) {
        std::vector<float> one(R);
        linear(t.m, x.data() + tok * C, 1, one.data());
        for (int r = 0; r < R; ++r) ASSERT_EQ(one[r], all[tok * R + r]);
      }
      // Any sub-batch (here: the last k tokens, every size of the few-token tiles and the first
      // of the GEMM) gives the same values too, and so does a range of its rows not starting at
      // row 0 (rows outside the range are left alone).
      for (int64_t k = 1; k <= std::min<int64_t>(n, 9); ++k) {
        SCOPED_TRACE(::testing::Message() << "last " << k << " tokens");
        std::vector<float> sub(k * R);
        linear(t.m, x.data() + (n - k) * C, k, sub.data());
        for (int64_t i = 0; i < k * R; ++i) ASSERT_EQ(sub[i], all[(n - k) * R + i]);
        std::vector<float> range(k * R, std::numeric_limits<float>::quiet_NaN());
        linear_rows(t.m, x.data() + (n - k) * C, k, range.data(), 1, R - 2);
        for (int64_t tok = 0; tok < k; ++tok)
          for (int64_t r = 0; r < R; ++r) {
            if (r >= 1 && r < R - 2) ASSERT_EQ(range[tok * R + r], all[(n - k + tok) * R + r]) << r;
            else ASSERT_TRUE(std::isnan(range[tok * R + r])) << "row " << r << " outside the range was written";
          }
      }
      // Row ranges give the same values as the full product.
      std::vector<float> part(n * R, 0.0f);
      linear_rows(t.m, x.data(), n, part.data(), 1, R - 2);
      for (int64_t tok = 0; tok < n; ++tok)
        for (int64_t r = 1; r < R - 2; ++r) ASSERT_EQ(part[tok * R + r], all[tok * R + r]);
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, LinearTest,
                         ::testing::Values(WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kMxfp4),
                         [](const auto& info) { return std::string(format_name(info.param)); });

// E8M0 0 is the subnormal 2^-127 and 254 is 2^127: the vector kernels build scales with
// integer ops and must treat both ends like the reference.
TEST(LinearMxfp4, ExtremeScales) {
  Rng rng(13);
  // Three 128-blocks and one trailing group; 18 rows: the AVX-512 one-token 8-row tile runs too.
  const int64_t rows = 18, cols = 416;
  std::vector<uint8_t> packed(rows * cols / 2), scales(rows * cols / 32);
  for (auto& b : packed) b = static_cast<uint8_t>(rng.below(256));
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = i % 5 == 0 ? 0 : i % 7 == 0 ? 1 : static_cast<uint8_t>(100 + rng.below(40));
  std::fill_n(&scales[2 * (cols / 32)], cols / 32, 0);  // row 2: only 2^-127 groups (sums near FLT_MIN)
  Matrix m{WeightFormat::kMxfp4, rows, cols, packed.data(), scales.data()};
  // 2, 3: the AVX-512 decode tiles; 4, 9: the AVX-512 batched tiles and the AVX2 streamed passes
  // (4 tokens: 2 rows x 4); 17: the AVX2 L1 panel.
  for (int64_t n : {1, 2, 3, 4, 9, 17}) {
    std::vector<float> x = random_vec(rng, n * cols);
    const std::vector<double> want = exact_product(m, x, n);
    // The error bound of an fp32 dot product scales with sum |w x|, not with |sum w x|.
    std::vector<float> xa(x.size()), row(cols);
    for (size_t i = 0; i < x.size(); ++i) xa[i] = std::fabs(x[i]);
    std::vector<double> mag(n * rows);
    for (int64_t r = 0; r < rows; ++r) {
      portable::dequant_row(m, r, row.data());
      for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < cols; ++c) mag[t * rows + r] += std::fabs(static_cast<double>(row[c])) * xa[t * cols + c];
    }
    for_each_isa([&](Isa) {
      std::vector<float> y(n * rows);
      linear(m, x.data(), n, y.data());
      for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-6 * mag[i] + 1e-40) << i;
    });
  }
  // Large scales stay finite and exact enough too.
  for (auto& s : scales) s = 200;
  std::vector<float> x = random_vec(rng, cols, 1e-20);
  const std::vector<double> want = exact_product(m, x, 1);
  double top = 0;
  for (double v : want) top = std::max(top, std::fabs(v));
  ASSERT_GT(top, 1.0);  // 2^73 * 1e-20 * a few
  for_each_isa([&](Isa) {
    std::vector<float> y(rows);
    linear(m, x.data(), 1, y.data());
    for (int64_t i = 0; i < rows; ++i) ASSERT_NEAR(y[i], want[i], 1e-5 * top) << i;
  });
}

// Under precision p, t.m times x (n tokens) matches the fp64 product with bf16-rounded
// activations on every ISA, and is batch-invariant: single tokens and row ranges give the
// same bits.
void expect_rounded_product(const TestMatrix& t, const std::vector<float>& x, int64_t n, Precision p) {
  const int64_t R = t.m.rows, C = t.m.cols;
  std::vector<float> xr(n * C);
  portable::round_to_bf16(x.data(), n * C, xr.data());
  const std::vector<double> want = exact_product(t.m, xr, n);
  for_each_isa([&](Isa) {
    std::vector<float> all(n * R);
    linear(t.m, x.data(), n, all.data(), p);
    ASSERT_TRUE(near_exact(all, want, C));
    ASSERT_TRUE(tokens_match_alone(t.m, x, n, all, p));
    if (R > 2) {
      std::vector<float> part(n * R, 0.0f);
      linear_rows(t.m, x.data(), n, part.data(), 1, R - 1, p);
      for (int64_t tok = 0; tok < n; ++tok)
        for (int64_t r = 1; r < R - 1; ++r) ASSERT_EQ(part[tok * R + r], all[tok * R + r]);
    }
  });
}

// Precision::kBf16: bf16 weights times bf16-rounded activations, fp32 accumulation, on every
// ISA (vdpbf16ps where available); batch-invariant within the precision; other formats exact.
TEST(LinearBf16Precision, MatchesRoundedReferenceAndIsBatchInvariant) {
  Rng rng(17);
  for (auto [R, C, n] : {std::tuple<int64_t, int64_t, int64_t>{5, 32, 1}, {37, 320, 6}, {9, 1037, 13}, {33, 2100, 50},
                         {4, 96, 7}}) {
    SCOPED_TRACE(::testing::Message() << R << "x" << C << " n=" << n);
    TestMatrix t = make_matrix(WeightFormat::kBF16, R, C, rng);
    expect_rounded_product(t, random_vec(rng, n * C), n, Precision::kBf16);
  }
  // fp32 weights ignore the precision; MXFP4 weights ignore kBf16 (only kBf16All reaches them).
  for (auto [fmt, p] : {std::pair{WeightFormat::kF32, Precision::kBf16}, std::pair{WeightFormat::kF32, Precision::kBf16All},
                        std::pair{WeightFormat::kMxfp4, Precision::kBf16}}) {
    TestMatrix q = make_matrix(fmt, 8, 64, rng);
    std::vector<float> x = random_vec(rng, 64), a(8), b(8);
    linear(q.m, x.data(), 1, a.data());
    linear(q.m, x.data(), 1, b.data(), p);
    EXPECT_EQ(a, b) << format_name(fmt) << " " << precision_name(p);
  }
  // kBf16All rounds bf16-weight products exactly as kBf16 does.
  {
    TestMatrix q = make_matrix(WeightFormat::kBF16, 9, 200, rng);
    std::vector<float> x = random_vec(rng, 3 * 200), a(27), b(27);
    linear(q.m, x.data(), 3, a.data(), Precision::kBf16);
    linear(q.m, x.data(), 3, b.data(), Precision::kBf16All);
    EXPECT_EQ(a, b);
  }
  EXPECT_EQ(parse_precision("bf16-all"), Precision::kBf16All);
  EXPECT_STREQ(precision_name(Precision::kBf16All), "bf16-all");
  EXPECT_EQ(parse_precision("bf16"), Precision::kBf16);
  EXPECT_EQ(parse_precision("fp32"), Precision::kF32);
  EXPECT_THROW(parse_precision("fp16"), Error);
}

// Precision::kBf16All with MXFP4 weights: the exact weights times bf16-rounded activations, on every
// ISA (the vdpbf16ps kernel where available, with its pair order and partial last 128-block);
// batch-invariant within the precision; zero and extreme scales as in the fp32 kernels.
TEST(LinearBf16Precision, Mxfp4MatchesRoundedReferenceAndIsBatchInvariant) {
  Rng rng(19);
  for (auto [R, C, n] : {std::tuple<int64_t, int64_t, int64_t>{5, 32, 1}, {3, 96, 2}, {37, 128, 6}, {9, 416, 13},
                         {33, 2336, 50}, {7, 3584, 3}, {18, 1056, 29},
                         {3, 4352, 7}, {5, 4160, 9}}) {  // column blocks; a partial block in the second
    SCOPED_TRACE(::testing::Message() << R << "x" << C << " n=" << n);
    TestMatrix t = make_matrix(WeightFormat::kMxfp4, R, C, rng);
    for (size_t i = 0; i < t.scales.size(); i += 7) t.scales[i] = i % 2 == 0 ? 0 : 1;  // the subnormal path
    expect_rounded_product(t, random_vec(rng, n * C), n, Precision::kBf16All);
  }
}

// The fp32 activation orders of the MXFP4 kernels put every column exactly once (the kernels'
// results against the exact product check that each lands where its weight is).
TEST(LinearMxfp4, ActivationOrdersArePermutations) {
  for (auto shuffle : {mxfp4_shuffle_activations, mxfp4_shuffle_activations_pairs, mxfp4_shuffle_activations_wide})
    for (int64_t cols : {32, 64, 96, 160, 224, 384}) {  // odd and even group counts, whole and partial 128-blocks
      std::vector<float> x(cols), xs(cols, -1.0f);
      for (int64_t c = 0; c < cols; ++c) x[c] = static_cast<float>(c);
      shuffle(x.data(), cols, xs.data());
      std::vector<int> seen(cols, 0);
      for (float v : xs) {
        ASSERT_GE(v, 0.0f) << cols;
        ++seen[static_cast<size_t>(v)];
      }
      for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(seen[c], 1) << "column " << c << " of " << cols;
    }
  // The pair order, spelled out for the first pair's first two runs (group 0 bytes 0-3, group 1
  // bytes 0-3; low nibbles, so even columns).
  std::vector<float> x(64), xs(64);
  for (int c = 0; c < 64; ++c) x[c] = static_cast<float>(c);
  mxfp4_shuffle_activations_pairs(x.data(), 64, xs.data());
  const std::vector<float> first(xs.begin(), xs.begin() + 16);
  EXPECT_EQ(first, (std::vector<float>{0, 2, 4, 6, 32, 34, 36, 38, 8, 10, 12, 14, 40, 42, 44, 46}));
  EXPECT_EQ(xs[32], 1.0f);  // run 4: the high nibbles, odd columns
}

// The pair order of the MXFP4 bf16 kernel: every column lands once, the padding is zero.
TEST(LinearBf16Precision, Mxfp4ActivationPackingIsAPermutation) {
  const int64_t cols = 160;  // one full block and a partial one
  std::vector<float> x(cols);
  for (int64_t c = 0; c < cols; ++c) x[c] = static_cast<float>(c + 1);  // exact in bf16
  std::vector<uint16_t> out(256, 0xffff);
  mxfp4_pack_bf16_activations(x.data(), cols, out.data());
  std::vector<int> seen(cols, 0);
  int zeros = 0;
  for (uint16_t b : out) {
    const float v = bf16_to_f32(b);
    if (v == 0.0f) {
      ++zeros;
      continue;
    }
    ASSERT_GE(v, 1.0f);
    ASSERT_LE(v, static_cast<float>(cols));
    ++seen[static_cast<int>(v) - 1];
  }
  EXPECT_EQ(zeros, 256 - cols);
  for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(seen[c], 1) << c;
  // Column 2(16L + m) + 1 of block 0 sits at 64 + 8L + m (the high nibble of byte 16L + m).
  EXPECT_EQ(bf16_to_f32(out[64 + 8 * 2 + 3]), static_cast<float>(2 * (16 * 2 + 3) + 1 + 1));
}

// Batches large enough for the AMX kernel's step chunks (several column groups, K walked in
// chunks, partial row blocks, widths that are not whole steps): every ISA stays as close to the
// fp64 product as the plain fp32 reference does, and single tokens give the same bits.
TEST(LinearBf16, LargeBatchesMatchTheExactProduct) {
  Rng rng(23);
  for (auto [R, C, n] : {std::tuple<int64_t, int64_t, int64_t>{40, 4100, 70}, {97, 2048, 33}, {50, 3000, 6}}) {
    SCOPED_TRACE(::testing::Message() << R << "x" << C << " n=" << n);
    TestMatrix t = make_matrix(WeightFormat::kBF16, R, C, rng);
    std::vector<float> x = random_vec(rng, n * C);
    const std::vector<double> want = exact_product(t.m, x, n);
    double ref_err = 0;
    {
      std::vector<float> y(n * R);
      portable::linear_rows(t.m, x.data(), n, y.data(), 0, R);
      for (size_t i = 0; i < y.size(); ++i) ref_err = std::max(ref_err, std::fabs(y[i] - want[i]));
    }
    for_each_isa([&](Isa) {
      std::vector<float> all(n * R);
      linear(t.m, x.data(), n, all.data());
      double err = 0;
      for (size_t i = 0; i < all.size(); ++i) err = std::max(err, std::fabs(all[i] - want[i]));
      EXPECT_LE(err, 2.0 * ref_err + 1e-6);
      for (int64_t tok : {int64_t{0}, n / 2, n - 1}) {
        std::vector<float> one(R);
        linear(t.m, x.data() + tok * C, 1, one.data());
        for (int64_t r = 0; r < R; ++r) ASSERT_EQ(one[r], all[tok * R + r]) << "token " << tok << " row " << r;
      }
    });
  }
}

// Non-finite activations propagate as they do in plain fp32 (the AMX split keeps them in one piece).
TEST(LinearBf16, NonFiniteActivationsPropagate) {
  Rng rng(29);
  TestMatrix t = make_matrix(WeightFormat::kBF16, 20, 64, rng);
  std::vector<float> x = random_vec(rng, 64);
  x[5] = std::numeric_limits<float>::infinity();
  for_each_isa([&](Isa) {
    std::vector<float> y(20);
    linear(t.m, x.data(), 1, y.data());
    for (int64_t r = 0; r < 20; ++r) {
      const float w5 = bf16_to_f32(t.bf16[r * 64 + 5]);
      if (w5 > 0) {
        EXPECT_EQ(y[r], std::numeric_limits<float>::infinity()) << r;
      } else if (w5 < 0) {
        EXPECT_EQ(y[r], -std::numeric_limits<float>::infinity()) << r;
      }
    }
  });
}

// linear_pair gives exactly what two linear() calls give, for every format and ISA, across
// sizes that do and do not fill whole row blocks, and with mismatched matrices (two calls).
// Rows wider than the AVX-512 GEMM's column chunk (8192) keep their accumulators between
// chunks: still the exact product, and still bit-identical to each token alone (the GEMV).
TEST(LinearGemm, WideRowsInColumnChunks) {
  Rng rng(41);
  for (WeightFormat fmt : {WeightFormat::kF32, WeightFormat::kBF16})
    for (auto [R, C, n] : {std::tuple<int64_t, int64_t, int64_t>{7, 16389, 9}, {13, 24576, 13}, {6, 8208, 8}}) {
      SCOPED_TRACE(::testing::Message() << format_name(fmt) << " " << R << "x" << C << " n=" << n);
      TestMatrix t = make_matrix(fmt, R, C, rng);
      std::vector<float> x = random_vec(rng, n * C);
      const std::vector<double> want = exact_product(t.m, x, n);
      for_each_isa([&](Isa) {
        std::vector<float> all(n * R);
        linear(t.m, x.data(), n, all.data());
        ASSERT_TRUE(near_exact(all, want, C));
        ASSERT_TRUE(tokens_match_alone(t.m, x, n, all));
      });
    }
}

TEST(LinearPair, EqualsTwoCalls) {
  Rng rng(31);
  for (WeightFormat fmt : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kMxfp4})
    for (auto [ra, rb, cols, n] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{3, 5, 64, 1}, {100, 37, 256, 1},
                                   {200, 300, 512, 7}, {64, 64, 384, 20}}) {
      SCOPED_TRACE(::testing::Message() << format_name(fmt) << " " << ra << "+" << rb << "x" << cols << " n=" << n);
      TestMatrix a = make_matrix(fmt, ra, cols, rng), b = make_matrix(fmt, rb, cols, rng);
      std::vector<float> x = random_vec(rng, n * cols);
      for_each_isa([&](Isa) {
        std::vector<float> ya(n * ra), yb(n * rb), wa(n * ra), wb(n * rb);
        linear_pair(a.m, b.m, x.data(), n, ya.data(), yb.data());
        linear(a.m, x.data(), n, wa.data());
        linear(b.m, x.data(), n, wb.data());
        EXPECT_EQ(ya, wa);
        EXPECT_EQ(yb, wb);
      });
    }
  TestMatrix a = make_matrix(WeightFormat::kBF16, 8, 64, rng), b = make_matrix(WeightFormat::kF32, 9, 64, rng);
  std::vector<float> x = random_vec(rng, 64), ya(8), yb(9), wa(8), wb(9);
  linear_pair(a.m, b.m, x.data(), 1, ya.data(), yb.data());
  linear(a.m, x.data(), 1, wa.data());
  linear(b.m, x.data(), 1, wb.data());
  EXPECT_EQ(ya, wa);
  EXPECT_EQ(yb, wb);
}

// linear_batch: every job as linear() computes it alone (bit for bit, under each precision) and
// close to the exact product; jobs of several formats, widths and token counts, jobs sharing
// one x, an empty job, and batches small enough to run serially.
TEST(LinearBatch, EqualsSeparateCallsAndTheExactProduct) {
  Rng rng(37);
  struct Spec {
    WeightFormat fmt;
    int64_t rows, cols, n;
    int x;  // which activation set (jobs with the same one share x)
  };
  const std::vector<std::vector<Spec>> batches = {
      {{WeightFormat::kMxfp4, 300, 256, 1, 0}, {WeightFormat::kMxfp4, 300, 256, 1, 0},
       {WeightFormat::kMxfp4, 133, 384, 1, 1}, {WeightFormat::kBF16, 77, 256, 1, 0},
       {WeightFormat::kF32, 50, 100, 1, 2}, {WeightFormat::kMxfp4, 40, 256, 1, 5}},
      {{WeightFormat::kMxfp4, 96, 512, 9, 0}, {WeightFormat::kMxfp4, 96, 512, 9, 0},
       {WeightFormat::kMxfp4, 513, 160, 3, 1}, {WeightFormat::kBF16, 200, 512, 20, 2},
       {WeightFormat::kF32, 64, 64, 0, 3}, {WeightFormat::kMxfp4, 17, 4224, 2, 4}},
      {{WeightFormat::kBF16, 3, 32, 1, 0}, {WeightFormat::kMxfp4, 5, 64, 2, 1}},  // serial
  };
  for (size_t bi = 0; bi < batches.size(); ++bi) {
    SCOPED_TRACE(::testing::Message() << "batch " << bi);
    const std::vector<Spec>& specs = batches[bi];
    std::vector<TestMatrix> ms;
    std::vector<std::vector<float>> xs(8);
    for (const Spec& sp : specs) {
      ms.push_back(make_matrix(sp.fmt, sp.rows, sp.cols, rng));
      if (xs[sp.x].empty()) xs[sp.x] = random_vec(rng, std::max<int64_t>(sp.n, 1) * sp.cols);
    }
    for (Precision p : {Precision::kF32, Precision::kBf16All}) {
      for_each_isa([&](Isa) {
        std::vector<std::vector<float>> ys(specs.size());
        std::vector<LinearJob> jobs;
        for (size_t j = 0; j < specs.size(); ++j) {
          ys[j].assign(static_cast<size_t>(specs[j].n * specs[j].rows), -7.0f);
          jobs.push_back({&ms[j].m, xs[specs[j].x].data(), specs[j].n, ys[j].data(), p});
        }
        linear_batch(jobs);
        for (size_t j = 0; j < specs.size(); ++j) {
          const Spec& sp = specs[j];
          SCOPED_TRACE(::testing::Message() << "job " << j << " " << format_name(sp.fmt) << " " << sp.rows << "x"
                                            << sp.cols << " n=" << sp.n << " " << precision_name(p));
          std::vector<float> alone(static_cast<size_t>(sp.n * sp.rows));
          linear(ms[j].m, xs[sp.x].data(), sp.n, alone.data(), p);
          ASSERT_EQ(ys[j], alone);
          if (p != Precision::kF32 || sp.n == 0) continue;
          std::vector<float> x(xs[sp.x].begin(), xs[sp.x].begin() + sp.n * sp.cols);
          ASSERT_TRUE(near_exact(ys[j], exact_product(ms[j].m, x, sp.n), sp.cols));
        }
      });
    }
  }
}

TEST(LinearTransposed, MatchesPlainSum) {
  Rng rng(3);
  for (auto fmt : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kMxfp4}) {
    TestMatrix t = make_matrix(fmt, 19, 64, rng);
    for (int64_t n : {1, 4}) {
      std::vector<float> x = random_vec(rng, n * 19), y(n * 64);
      for_each_isa([&](Isa) {
        linear_transposed(t.m, x.data(), n, y.data());
        std::vector<float> row(64);
        for (int64_t tok = 0; tok < n; ++tok)
          for (int c = 0; c < 64; ++c) {
            double acc = 0;
            for (int r = 0; r < 19; ++r) {
              portable::dequant_row(t.m, r, row.data());
              acc += static_cast<double>(row[c]) * x[tok * 19 + r];
            }
            EXPECT_NEAR(y[tok * 64 + c], acc, 1e-5);
          }
      });
    }
  }
}

TEST(Matrix, RowSliceAndBytes) {
  Rng rng(5);
  TestMatrix t = make_matrix(WeightFormat::kMxfp4, 8, 64, rng);
  EXPECT_EQ(t.m.bytes(), 8u * 32 + 8u * 2);
  Matrix s = t.m.row_slice(3, 2);
  std::vector<float> a(64), b(64);
  portable::dequant_row(t.m, 4, a.data());
  portable::dequant_row(s, 1, b.data());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace k3
