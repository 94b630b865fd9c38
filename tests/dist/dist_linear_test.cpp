// Products with row-split matrices (kernels/linear.h, Matrix::row_split): run alone this is one
// rank; run under `mpirun -np R` (the dist_test_np* tests) every rank computes its rows and the
// ranks exchange them.  Either way each product must equal, bit for bit, the same product
// computed whole in this process, for every weight format and instruction set, for row counts
// that do not divide by the ranks or the row block, and for several products in one batch.
#include <gtest/gtest.h>

#include <cstring>

#include "base/numeric_types.h"
#include "base/thread_pool.h"
#include "dist/row_split.h"
#include "dist/world.h"
#include "kernels/kernel_test_util.h"
#include "kernels/linear.h"
#include "kernels/mxfp4.h"
#include "support/test_support.h"

namespace k3 {
namespace {

// A random matrix (kernels/kernel_test_util.h) split by output rows over the ranks.
testing::TestMatrix make(WeightFormat fmt, int64_t rows, int64_t cols, Rng& rng) {
  testing::TestMatrix t = testing::make_matrix(fmt, rows, cols, rng);
  t.m.row_split = true;
  return t;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(DistLinear, RowSplitProductsEqualTheWholeProduct) {
  testing::for_each_isa([](Isa) {
    for (WeightFormat fmt : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kMxfp4}) {
      for (int64_t n : {1, 3, 20}) {
        SCOPED_TRACE(::testing::Message() << format_name(fmt) << ", " << n << " tokens, rank " << dist::rank()
                                          << " of " << dist::size());
        Rng rng(1234 + n);
        // Fewer rows than ranks x block, a prime, and one wider than the vector width.
        std::vector<testing::TestMatrix> w;
        for (int64_t rows : {5, 37, 131}) w.push_back(make(fmt, rows, 96, rng));
        const std::vector<float> x = testing::random_vec(rng, n * 96);
        std::vector<std::vector<float>> split(w.size()), whole(w.size());
        std::vector<LinearJob> jobs;
        for (size_t j = 0; j < w.size(); ++j) {
          split[j].assign(n * w[j].m.rows, -1.0f);
          whole[j].assign(n * w[j].m.rows, -2.0f);
          jobs.push_back({&w[j].m, x.data(), n, split[j].data(), Precision::kF32});
        }
        linear_batch(jobs);  // collective when run over several ranks
        {
          SerialScope alone;  // inside it, this process computes every row itself
          for (size_t j = 0; j < w.size(); ++j) linear(w[j].m, x.data(), n, whole[j].data());
        }
        for (size_t j = 0; j < w.size(); ++j) EXPECT_TRUE(same_bits(split[j], whole[j])) << "product " << j;
        // The bf16 precision path is split the same way.
        if (fmt == WeightFormat::kBF16) {
          std::vector<float> a(n * w[1].m.rows), b(n * w[1].m.rows);
          linear(w[1].m, x.data(), n, a.data(), Precision::kBf16);
          SerialScope alone;
          linear(w[1].m, x.data(), n, b.data(), Precision::kBf16);
          EXPECT_TRUE(same_bits(a, b));
        }
      }
    }
  });
}

TEST(DistLinear, TrafficCountsTheRowsOfTheOtherRanks) {
  Rng rng(7);
  testing::TestMatrix w = make(WeightFormat::kF32, 100, 64, rng);
  const std::vector<float> x = testing::random_vec(rng, 2 * 64);
  std::vector<float> y(2 * 100);
  dist::reset_traffic();
  linear(w.m, x.data(), 2, y.data());
  const dist::Traffic t = dist::traffic();
  if (dist::size() == 1) {
    EXPECT_EQ(t.bytes_received, 0u);
    EXPECT_EQ(t.collectives, 0u);
  } else {
    EXPECT_EQ(t.collectives, 1u);
    EXPECT_EQ(t.bytes_received, (2 * 100 - 2 * dist::rows_of(100, dist::rank(), dist::size()).count()) * sizeof(float));
  }
}

TEST(DistWorld, CheckSameNamesTheRankThatDiffers) {
  dist::check_same(42, "value");  // equal everywhere: no error
  if (dist::size() == 1) return;
  const std::string err = testing::error_of([] { dist::check_same(dist::rank() == dist::size() - 1 ? 7 : 42, "value"); });
  EXPECT_NE(err.find("rank " + std::to_string(dist::size() - 1) + "'s value differs"), std::string::npos) << err;
}

}  // namespace
}  // namespace k3
