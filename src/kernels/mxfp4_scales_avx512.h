// Per-lane E8M0 block scales for the AVX-512 MXFP4 kernels (include after the ISA pragma).
//
// Both MXFP4 kernels (linear_mxfp4_avx512.cpp: fp32 activations; linear_mxfp4_bf16dot_avx512.cpp:
// bf16 activations) order a 128-column block so that vector lane i only ever holds columns of
// the block's 32-group i / 4.  block_scales() turns the block's 4 scale bytes into that lane
// vector, 2^(scale[i / 4] - 127), with integer ops.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/mxfp4.h"

namespace k3::avx512 {

// A zero byte is the subnormal 2^-127, which the exponent shift cannot express; kZeros marks
// row blocks whose scales contain one (callers find it once per block with memchr), so the
// common path carries no test.
template <bool kZeros>
inline __m512 block_scales(const uint8_t* s) {
  if constexpr (kZeros) {
    uint32_t u;
    std::memcpy(&u, s, 4);
    if (((u - 0x01010101u) & ~u & 0x80808080u) != 0) {
      alignas(64) float v[16];
      for (int i = 0; i < 16; ++i) v[i] = e8m0_to_f32(s[i / 4]);
      return _mm512_load_ps(v);
    }
  }
  // Rotate byte j of the broadcast word to bit 23 (left by 23 - 8j, mod 32), keep the exponent.
  const __m512i rot = _mm512_set_epi32(31, 31, 31, 31, 7, 7, 7, 7, 15, 15, 15, 15, 23, 23, 23, 23);
  int32_t word;
  std::memcpy(&word, s, 4);
  const __m512i b = _mm512_set1_epi32(word);
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_rolv_epi32(b, rot), _mm512_set1_epi32(0x7f800000)));
}

}  // namespace k3::avx512
