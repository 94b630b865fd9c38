// The weight matrices kernels consume: row-major [rows, cols] with y = W x, stored as fp32,
// bf16 or MXFP4 (compressed-tensors mxfp4-pack-quantized).  A Matrix never owns its bytes;
// they usually live in a memory-mapped checkpoint.
#pragma once

#include <cstdint>

namespace k3 {

enum class WeightFormat { kF32, kBF16, kMxfp4 };

struct Matrix {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  // kF32: float[rows*cols]; kBF16: uint16_t[rows*cols];
  // kMxfp4: uint8_t[rows*cols/2], column 2j in the low nibble of byte j, 2j+1 in the high nibble.
  const void* data = nullptr;
  // kMxfp4 only: E8M0 exponents uint8_t[rows*cols/32], one per 32 consecutive input columns.
  const uint8_t* scales = nullptr;
  // kMxfp4 only: true when a scan (scan_mxfp4_scales, mxfp4.h) found no 0x00 scale byte, so the
  // vector kernels skip their per-tile search for the subnormal 2^-127 scale.  Leave it false
  // unless such a scan set it: false only costs that search.
  bool scales_zero_free = false;
  // Split by output rows over the ranks of a multi-process run (dist/row_split.h): each rank
  // computes its own rows of every product with this matrix and receives the others' rows
  // (linear_batch).  Set by the weight binder for the large products; false everywhere else.
  bool row_split = false;
  // A row_split matrix whose bytes hold only this rank's rows (model/partition.h): data and
  // scales still address rows by their index in the whole matrix, but only the rank's own rows
  // are there, so the matrix must never be computed whole (linear_batch refuses to).
  bool own_rows_only = false;

  bool empty() const { return data == nullptr; }
  // Bytes streamed when the whole matrix is read once (weights + scales): data_bytes() of
  // `data`, scale_bytes() of `scales` (0 unless kMxfp4).
  uint64_t bytes() const { return data_bytes() + scale_bytes(); }
  uint64_t data_bytes() const;
  uint64_t scale_bytes() const;
  // The sub-matrix of rows [r0, r0 + n) (not row_split: a slice is computed whole).
  Matrix row_slice(int64_t r0, int64_t n) const;
};

const char* format_name(WeightFormat f);

}  // namespace k3
