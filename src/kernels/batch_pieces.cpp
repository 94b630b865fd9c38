#include "kernels/batch_pieces.h"

#include <algorithm>

namespace k3 {

void plan_batch_pieces(const std::vector<BatchShape>& shapes, int threads, bool serial, std::vector<BatchPiece>& out) {
  out.clear();
  double total = 0;
  for (const BatchShape& s : shapes)
    if (s.rows > 0) total += static_cast<double>(s.rows) * s.row_work;
  const double t = std::max(threads, 1), least = total / (256.0 * t);
  double left = total;
  for (size_t j = 0; j < shapes.size(); ++j) {
    const BatchShape& s = shapes[j];
    for (int64_t r = 0; r < s.rows;) {
      int64_t rows = s.rows - r;
      if (!serial) {
        const double want = std::max(least, left / (2.0 * t));
        rows = std::max<int64_t>(s.align, static_cast<int64_t>(want / s.row_work) / s.align * s.align);
        if (s.rows - r - rows < s.align) rows = s.rows - r;  // the rest, or no sliver of a block left behind
      }
      out.push_back({j, r, r + rows});
      r += rows;
      left -= static_cast<double>(rows) * s.row_work;
    }
  }
}

}  // namespace k3
