// AMX-BF16 probe loop: the peak rate of the tile unit (Isa::kAmx).
#include <cstdint>

#include "perf/machine.h"

#include "kernels/simd/isa.h"
#define K3_ISA_LEVEL K3_ISA_AMX
#include "kernels/simd/isa_begin.h"

namespace k3::perf_isa {

double amx_bf16_loop(int64_t iters) {
  struct alignas(64) Config {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
  } c;
  for (int t = 0; t < 8; ++t) c.rows[t] = 16, c.colsb[t] = 64;
  asm volatile("ldtilecfg %0" ::"m"(c));  // (see kernels/linear_amx.cpp on _tile_loadconfig)
  alignas(64) static const uint16_t ones[16 * 32] = {};
  _tile_loadd(4, ones, 64);
  _tile_loadd(5, ones, 64);
  _tile_loadd(6, ones, 64);
  _tile_loadd(7, ones, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  iters /= 8;  // each tile product is 16 x 16 x 32 multiply-adds
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_release();
  return static_cast<double>(iters) * 4 * 16 * 16 * 32 * 2;
}

}  // namespace k3::perf_isa

#include "kernels/simd/isa_end.h"
