// linear_batch's split of a batch over the pool (kernels/batch_pieces.h): every row of every
// product exactly once, whole row blocks, large pieces first and a small tail, for several
// thread counts.
#include "kernels/batch_pieces.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace k3 {
namespace {

double work(const BatchShape& s, const BatchPiece& p) { return static_cast<double>(p.r1 - p.r0) * s.row_work; }

// Every row of each product once, in order, in pieces of whole blocks (but a product's last).
void expect_cover(const std::vector<BatchShape>& shapes, const std::vector<BatchPiece>& pieces) {
  std::vector<int64_t> next(shapes.size(), 0);
  for (const BatchPiece& p : pieces) {
    ASSERT_LT(p.job, shapes.size());
    const BatchShape& s = shapes[p.job];
    EXPECT_EQ(p.r0, next[p.job]) << "job " << p.job;
    EXPECT_GT(p.r1, p.r0);
    EXPECT_LE(p.r1, s.rows);
    if (p.r1 != s.rows) {
      EXPECT_EQ((p.r1 - p.r0) % s.align, 0) << "job " << p.job << " rows " << p.r0;
    }
    next[p.job] = p.r1;
  }
  for (size_t j = 0; j < shapes.size(); ++j) EXPECT_EQ(next[j], std::max<int64_t>(shapes[j].rows, 0)) << "job " << j;
}

TEST(BatchPieces, CoverEveryRowOnceInWholeBlocks) {
  const std::vector<std::vector<BatchShape>> batches = {
      {{12288, 7168, 16}},                                          // one decode GEMV
      {{7168, 12288.0 * 256, 16}},                                  // one prefill GEMM
      {{3072, 3584, 16}, {3072, 3584, 16}, {3584, 3072, 16}, {0, 3584, 16}, {3072, 3584, 16}},
      {{17, 4224, 16}, {513, 160, 16}, {40, 256, 48}, {1, 100, 16}},
  };
  for (const auto& shapes : batches)
    for (int threads : {1, 2, 3, 8, 64})
      for (bool serial : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "threads " << threads << " serial " << serial << " jobs " << shapes.size());
        std::vector<BatchPiece> pieces;
        plan_batch_pieces(shapes, threads, serial, pieces);
        expect_cover(shapes, pieces);
        if (serial) {
          size_t nonempty = 0;
          for (const BatchShape& s : shapes) nonempty += s.rows > 0;
          EXPECT_EQ(pieces.size(), nonempty);
        }
      }
}

// One large product: the first piece is about 1 / (2 x threads) of it, sizes never grow, and the
// last pieces (what a thread finishing early may wait for) are about total / (256 x threads).
TEST(BatchPieces, LargeFirstSmallTail) {
  for (int threads : {2, 4, 16}) {
    SCOPED_TRACE(::testing::Message() << "threads " << threads);
    const std::vector<BatchShape> shapes = {{12288, 7168, 16}};
    std::vector<BatchPiece> pieces;
    plan_batch_pieces(shapes, threads, false, pieces);
    expect_cover(shapes, pieces);
    const double total = 12288.0 * 7168;
    EXPECT_NEAR(work(shapes[0], pieces.front()), total / (2.0 * threads), 16 * 7168.0);
    for (size_t i = 1; i < pieces.size(); ++i)
      EXPECT_LE(pieces[i].r1 - pieces[i].r0, pieces[i - 1].r1 - pieces[i - 1].r0 + 16) << "piece " << i;
    const double tail = total / (256.0 * threads) + 2 * 16 * 7168.0;
    for (size_t i = pieces.size() - static_cast<size_t>(threads); i < pieces.size(); ++i)
      EXPECT_LE(work(shapes[0], pieces[i]), tail) << "piece " << i;
    EXPECT_LE(pieces.size(), static_cast<size_t>(64 + 8 * threads));
  }
}

// A decode step's 32 expert products: whole products first, then the last ones split small.
TEST(BatchPieces, ManyEqualProductsEndInSmallPieces) {
  std::vector<BatchShape> shapes(32, BatchShape{3072, 3584, 16});
  std::vector<BatchPiece> pieces;
  plan_batch_pieces(shapes, 2, false, pieces);
  expect_cover(shapes, pieces);
  EXPECT_EQ(pieces.front().r1 - pieces.front().r0, 3072);  // the first products whole
  const double total = 32 * 3072.0 * 3584;
  EXPECT_LE(work(shapes.back(), pieces.back()), total / 512 + 2 * 16 * 3584.0);
}

}  // namespace
}  // namespace k3
