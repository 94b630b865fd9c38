// How linear_batch (linear.h) splits a batch of products over the thread pool: pieces of whole
// row blocks of one product each, handed out by the pool in order.  Kept apart so the split can
// be checked for any thread count (tests/kernels/batch_pieces_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace k3 {

// Rows [r0, r1) of product `job`.
struct BatchPiece {
  size_t job;
  int64_t r0, r1;
};

// One product of the batch as the split sees it: rows, work per row (columns x tokens), and the
// row multiple its pieces keep (the kernels' row block); rows <= 0: nothing to do.
struct BatchShape {
  int64_t rows = 0;
  double row_work = 0;
  int64_t align = 16;
};

// The pieces for `threads` threads, in the order they are to be handed out, into `out`:
// decreasing sizes, each about 1 / (2 x threads) of the work not yet handed out and at least
// total / (256 x threads) (or one row block), so that a thread which finishes early finds small
// pieces left instead of waiting for another's last large one.  The first ones are large enough
// to keep each thread's rows as long streams.  Equal pieces (e.g. total / 16) leave one thread
// waiting for the other's last piece at the end of every call; shrinking pieces cut that wait
// to a small fraction of the call.
// serial: one piece per product.
void plan_batch_pieces(const std::vector<BatchShape>& shapes, int threads, bool serial, std::vector<BatchPiece>& out);

}  // namespace k3
