#include "kernels/matrix.h"

#include "base/error.h"

namespace k3 {

uint64_t Matrix::data_bytes() const {
  const uint64_t n = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols);
  switch (format) {
    case WeightFormat::kF32: return n * 4;
    case WeightFormat::kBF16: return n * 2;
    case WeightFormat::kMxfp4: return n / 2;
  }
  return 0;
}

uint64_t Matrix::scale_bytes() const {
  return format == WeightFormat::kMxfp4 ? static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) / 32 : 0;
}

Matrix Matrix::row_slice(int64_t r0, int64_t n) const {
  Matrix m = *this;
  m.rows = n;
  m.row_split = false;
  K3_CHECK(!own_rows_only, "internal error: a slice of a matrix that holds only this rank's rows");
  switch (format) {
    case WeightFormat::kF32: m.data = static_cast<const float*>(data) + r0 * cols; break;
    case WeightFormat::kBF16: m.data = static_cast<const uint16_t*>(data) + r0 * cols; break;
    case WeightFormat::kMxfp4:
      m.data = static_cast<const uint8_t*>(data) + r0 * (cols / 2);
      m.scales = scales + r0 * (cols / 32);
      break;
  }
  return m;
}

const char* format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return "f32";
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kMxfp4: return "mxfp4";
  }
  return "?";
}

}  // namespace k3
