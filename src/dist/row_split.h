// How the latency layout splits a matrix by output rows over the ranks: whole blocks of
// kRowBlock rows (the kernels' row tile, so that no rank gets a ragged tile in the middle of
// its range), as evenly as blocks allow, in rank order.  Any split gives the same values: a
// product's row r depends only on row r of the weights and on x (kernels/linear.h).
#pragma once

#include <cstdint>

namespace k3::dist {

constexpr int64_t kRowBlock = 16;

struct RowRange {
  int64_t r0 = 0, r1 = 0;
  int64_t count() const { return r1 - r0; }
};

// Rank `rank` of `ranks`'s rows of a matrix with `rows` rows.
inline RowRange rows_of(int64_t rows, int rank, int ranks) {
  const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  auto edge = [&](int k) {
    const int64_t b = blocks * k / ranks;
    return b * kRowBlock < rows ? b * kRowBlock : rows;
  };
  return {edge(rank), edge(rank + 1)};
}

}  // namespace k3::dist
