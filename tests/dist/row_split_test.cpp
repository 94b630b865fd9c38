// The latency layout's row split: every row owned by exactly one rank, in rank order, in whole
// row blocks, as evenly as blocks allow, for counts that do and do not divide.
#include <gtest/gtest.h>

#include "dist/row_split.h"

namespace k3::dist {
namespace {

TEST(RowSplit, CoversEveryRowOnceInBlocks) {
  for (int ranks = 1; ranks <= 9; ++ranks) {
    for (int64_t rows : {0, 1, 5, 15, 16, 17, 37, 48, 100, 129, 3072, 7168, 163840, 163841}) {
      SCOPED_TRACE(::testing::Message() << rows << " rows over " << ranks << " ranks");
      int64_t next = 0, least = rows, most = 0;
      for (int k = 0; k < ranks; ++k) {
        const RowRange r = rows_of(rows, k, ranks);
        EXPECT_EQ(r.r0, next);
        EXPECT_LE(r.r0, r.r1);
        if (r.r1 < rows) {
          EXPECT_EQ(r.r1 % kRowBlock, 0);
        }
        next = r.r1;
        least = std::min(least, r.count());
        most = std::max(most, r.count());
      }
      EXPECT_EQ(next, rows);
      EXPECT_LE(most - least, kRowBlock);  // within one block of each other
    }
  }
}

}  // namespace
}  // namespace k3::dist
