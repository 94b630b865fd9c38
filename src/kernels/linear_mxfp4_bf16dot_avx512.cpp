// The opt-in bf16-activation path (Precision::kBf16, linear.h) for MXFP4 weights on CPUs with
// AVX512-BF16.  Every E2M1 value is exact in bf16, so the nibbles become bf16 weights with
// in-lane byte lookups (two vpshufb tables, the bf16 value's low and high byte, and two byte
// interleaves per 64 weights), and vdpbf16ps multiplies 32 weight / activation pairs per
// instruction: per 128-column block and (row, token) 4 dot-product instructions instead of 8
// FMAs, after 11 decode instructions instead of 15.  The products of bf16 activations with
// E2M1 weights are exact in fp32; only the fp32 accumulation rounds.
//
// Order: a 64-byte block of packed nibbles (128 columns) decodes into 4 vectors of 32 bf16,
//   A = low nibbles of bytes 16L + m, B = low nibbles of bytes 16L + 8 + m,
//   C, D = the same bytes' high nibbles      (L = 128-bit lane 0..3, m = 0..7; word 8L + m)
// and the activations are packed in that order (mxfp4_pack_bf16_activations, linear.h), so
// fp32 lane j of each dot product only ever holds columns of the block's 32-group j / 4: one
// per-lane scale vector per block (mxfp4_avx512.h), as in the fp32 kernel.
//
// Per (row, token), whatever n, the tiling or the row range:
//   per block: p = dot(A, xa); p = dot(p, B, xb); p = dot(p, C, xc); p = dot(p, D, xd);
//              acc = fma(p, s, acc)      (a partial last block: zeroed weights and activations)
//   y = horizontal sum of acc
// so results are bit-identical alone or in a batch (within this precision).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "base/aligned.h"
#include "base/numeric_types.h"
#include "kernels/linear.h"
#include "kernels/matrix.h"
#include "kernels/mxfp4.h"

#include "kernels/simd/isa.h"
#define K3_ISA_LEVEL K3_ISA_AVX512BF16
#include "kernels/simd/isa_begin.h"

#include "kernels/mxfp4_avx512.h"

namespace k3::avx512 {
namespace {

// vpshufb tables: byte n = the low / high byte of bf16(E2M1 value n), in every 128-bit lane.
struct Tables {
  __m512i lo, hi;
};
const Tables& tables() {
  static const Tables t = [] {
    alignas(16) uint8_t lo[16], hi[16];
    for (int n = 0; n < 16; ++n) {
      const uint16_t b = f32_to_bf16(kE2M1Values[n]);  // exact: E2M1 values have 2 significant bits
      lo[n] = static_cast<uint8_t>(b & 0xff);
      hi[n] = static_cast<uint8_t>(b >> 8);
    }
    return Tables{_mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(lo))),
                  _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(hi)))};
  }();
  return t;
}

inline void decode(__m512i raw, const Tables& tb, __m512bh out[4]) {
  const __m512i m = _mm512_set1_epi8(0x0f);
  const __m512i lo = _mm512_and_si512(raw, m);
  const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m);
  const __m512i llo = _mm512_shuffle_epi8(tb.lo, lo), lhi = _mm512_shuffle_epi8(tb.hi, lo);
  const __m512i hlo = _mm512_shuffle_epi8(tb.lo, hi), hhi = _mm512_shuffle_epi8(tb.hi, hi);
  out[0] = (__m512bh)_mm512_unpacklo_epi8(llo, lhi);
  out[1] = (__m512bh)_mm512_unpackhi_epi8(llo, lhi);
  out[2] = (__m512bh)_mm512_unpacklo_epi8(hlo, hhi);
  out[3] = (__m512bh)_mm512_unpackhi_epi8(hlo, hhi);
}

// R rows (packed bytes at w0 + i*ws, scales at s0 + i*ss) x T tokens (packed bf16 activations
// at x0 + t*xs), 128-blocks [b0, b1) of a row with `cols` columns; accumulators in acc_mem
// between calls (row i, token t at (i * acc_stride + t) * 16).
template <int R, int T, bool kZeros>
__attribute__((noinline)) void tile(const uint8_t* w0, int64_t ws, const uint8_t* s0, int64_t ss, const uint16_t* x0,
                                    int64_t xs, int64_t b0, int64_t b1, int64_t cols, float* acc_mem,
                                    int64_t acc_stride) {
  const Tables tb = tables();  // a copy in registers
  const int64_t full = cols / 128;
  __m512 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t)
      acc[i][t] = b0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(acc_mem + (i * acc_stride + t) * 16);
  for (int64_t b = b0; b < b1; ++b) {
    __m512bh wv[R][4];
    __m512 sv[R];
    if (b < full) {
      for (int i = 0; i < R; ++i) {
        const uint8_t* p = w0 + i * ws + b * 64;
        _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes), _MM_HINT_T0);
        decode(_mm512_loadu_si512(p), tb, wv[i]);
        sv[i] = block_scales<kZeros>(s0 + i * ss + b * 4);
      }
    } else {  // the partial last block: only its (cols % 128) / 32 groups exist
      const int64_t groups = (cols % 128) / 32;
      const __mmask64 mask = (__mmask64{1} << (groups * 16)) - 1;
      for (int i = 0; i < R; ++i) {
        decode(_mm512_maskz_loadu_epi8(mask, w0 + i * ws + b * 64), tb, wv[i]);
        uint8_t s[4] = {127, 127, 127, 127};  // 1.0 for the absent groups (their weights are zero)
        std::memcpy(s, s0 + i * ss + b * 4, static_cast<size_t>(groups));
        sv[i] = block_scales<true>(s);
      }
    }
    for (int t = 0; t < T; ++t) {
      const uint16_t* xb = x0 + t * xs + b * 128;
      __m512bh xv[4];
      for (int k = 0; k < 4; ++k) xv[k] = (__m512bh)_mm512_loadu_si512(xb + 32 * k);
      for (int i = 0; i < R; ++i) {
        __m512 p = _mm512_dpbf16_ps(_mm512_setzero_ps(), wv[i][0], xv[0]);
        p = _mm512_dpbf16_ps(p, wv[i][1], xv[1]);
        p = _mm512_dpbf16_ps(p, wv[i][2], xv[2]);
        p = _mm512_dpbf16_ps(p, wv[i][3], xv[3]);
        acc[i][t] = _mm512_fmadd_ps(p, sv[i], acc[i][t]);
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(acc_mem + (i * acc_stride + t) * 16, acc[i][t]);
}

// Decode: every row over all its 128-blocks (gemv_rows in mxfp4_avx512.h).
void gemv(const Matrix& m, const uint16_t* x, float* y, int64_t r0, int64_t r1) {
  const uint8_t* pk = static_cast<const uint8_t*>(m.data);
  const int64_t cols = m.cols, rb = cols / 2, sb = cols / 32, blocks = (cols + 127) / 128;
  gemv_rows<4, 1>(m, y, r0, r1, [&]<int R, int, bool kZeros>(int64_t r, int64_t step, float* acc) {
    tile<R, 1, kZeros>(pk + r * rb, step * rb, m.scales + r * sb, step * sb, x, 0, 0, blocks, cols, acc, 1);
  });
}

}  // namespace

void linear_rows_mxfp4_bf16dot(const Matrix& m, const uint16_t* xb, int64_t xstride, int64_t n, float* y, int64_t r0,
                               int64_t r1) {
  if (n == 1) {
    gemv(m, xb, y, r0, r1);
    return;
  }
  const uint8_t* pk = static_cast<const uint8_t*>(m.data);
  const int64_t cols = m.cols;
  batched_rows<PairRowsWalk>(m, n, y, r0, r1,
               [&]<int R, int T, bool kZeros>(int64_t r, int64_t t, int64_t c0, int64_t c1, float* acc, int64_t as) {
                 tile<R, T, kZeros>(pk + r * (cols / 2), cols / 2, m.scales + r * (cols / 32), cols / 32,
                                    xb + t * xstride, xstride, c0 / 128, (c1 + 127) / 128, cols, acc, as);
               });
}

}  // namespace k3::avx512

#include "kernels/simd/isa_end.h"
