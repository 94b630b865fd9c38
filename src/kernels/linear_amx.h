// Products with bf16 weights on the AMX tile unit (Isa::kAmx), exact to fp32 accuracy.
//
// The tiles multiply bf16 by bf16 and accumulate in fp32.  The weights already are bf16; each
// fp32 activation is split into three bf16 pieces, x = hi + mid + lo exactly (hi = bf16(x),
// mid = bf16(x - hi), lo = x - hi - mid, which has at most 8 significant bits left), so every
// product w*piece is exact in fp32 and only the fp32 accumulation rounds, as with FMA.
// (Non-finite x keeps hi = x and zero mid/lo; activations below 2^-126 are flushed by the tile
// unit, an error under 1e-38 per product.)  Under Precision::kBf16 only hi is used.
//
// Tokens and pieces are laid out as the columns of the tile's B operand (column j = t*P + p), so
// one token costs 3 columns and decode streams each weight tile once.  Per (row, token) the
// arithmetic is fixed whatever n, the tiling, the row range or the thread:
//   S_p = sum over 32-column steps k = 0, 1, ... of the tile dot product of step k  (fp32)
//   y   = (S_hi + S_mid) + S_lo
// so a sequence gets bit-identical results alone or inside a continuous batch.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/matrix.h"

namespace k3::amx {

// The B operand: activations split into pieces and packed in the tiles' pair-interleaved layout,
// [group of 16 columns][32-column step][16 pairs][16 columns][2], zero-padded.
struct PackedActivations {
  int64_t n = 0, cols = 0;
  int pieces = 3;
  int64_t steps = 0;   // ceil(cols / 32)
  int64_t groups = 0;  // ceil(n * pieces / 16)
  std::vector<uint16_t> storage;
  uint16_t* data = nullptr;  // 64-byte aligned start inside storage
  const uint16_t* tile(int64_t group, int64_t step) const { return data + (group * steps + step) * 512; }
};

// Packs tokens [t0, t1) of x ([n, cols] fp32) into p, which pack_init sized for n tokens.
void pack_init(int64_t n, int64_t cols, int pieces, PackedActivations& p);
void pack_tokens(const float* x, int64_t t0, int64_t t1, PackedActivations& p);

// Rows [r0, r1) of y ([n, w.rows]) for bf16 weights w.
void linear_rows(const Matrix& w, const PackedActivations& x, float* y, int64_t r0, int64_t r1);

}  // namespace k3::amx
