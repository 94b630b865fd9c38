// The AVX-512 vector type: 16 fp32 lanes, the operations every kernel written over a vector type
// uses (activations, KDA, MLA decode, the dense linear tiles, the small GEMM), and the tile
// shapes of those kernels at this level (32 vector registers).  Included by simd/isa_begin.h for
// K3_ISA_LEVEL == K3_ISA_AVX512 only, inside the AVX-512 target region.
#pragma once

#if K3_ISA_LEVEL != K3_ISA_AVX512
#error "kernels/simd/avx512.h is compiled for AVX-512 only (include kernels/simd/isa_begin.h)"
#endif

#include "kernels/simd/exp.h"

namespace k3::simd {

struct Avx512 {
  using V = __m512;
  static constexpr int kLanes = 16;

  // ---- tile shapes ----
  // Dense linear (linear_tiles.h): up to 7 tokens, rows streamed once, 4 rows per tile for every
  // token count (at 7 tokens 28 accumulators + 4 weights, the activations read as memory operands
  // of the FMAs); from 8 tokens linear.cpp runs the GEMM (linear_gemm_avx512.cpp), so the blocked
  // tiles serve only the MXFP4 panels.
  static constexpr int kDenseRows = 4, kDenseTokens = 6;  // 24 accumulators + 4 weights + 1 x
  static constexpr int kStreamTokens = 7, kStreamMax = 7;
  static constexpr int stream_rows(int) { return 4; }
  static constexpr int kGemmRows = 3, kGemmVecs = 8;  // small_gemm_tiles.h
  static constexpr int kKdaRows = 6, kKdaVecs = 4;    // kda_chunk.h: 24 accumulators + 4 B vectors + 1 A
  // mla_attention_tiles.h: score tile 8 rows x 3 head vectors, value tile 8 heads x 3 latent
  // vectors: 24 of the 32 registers.
  static constexpr int kMlaRows = 8, kMlaVecs = 3;

  // ---- arithmetic ----
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V abs(V a) { return _mm512_abs_ps(a); }
  static V round(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // |mag| with the sign of s (mag non-negative).
  static V copysign(V mag, V s) {
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(mag), _mm512_castps_si512(s),
                                                         _mm512_set1_epi32(INT32_MIN), 0xD8));
  }
  // a < b ? t : f, per lane.
  static V select_lt(V a, V b, V t, V f) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), f, t); }
  // The sum of the lanes, in a fixed order.
  static float reduce(V v) { return _mm512_reduce_add_ps(v); }

  // e^x (simd/exp.h), scaled by 2^n with scalef (exact; it underflows to 0 / overflows to inf
  // like the true value).
  static V exp(V x) { return simd::exp<Avx512>(x); }
  static V exp_clamp(V x) { return min(max(x, set1(-150.0f)), set1(100.0f)); }
  static V exp_scale(V y, V n, V) { return _mm512_scalef_ps(y, n); }

  // ---- memory ----
  static __mmask16 mask(int64_t k) { return static_cast<__mmask16>((1u << k) - 1u); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  // The first n (< 16) floats at p, zeros after; reads nothing past p + n.
  static V load_first(const float* p, int n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static V load_tail(const float* p, int64_t k) { return _mm512_maskz_loadu_ps(mask(k), p); }
  // Weights: fp32 as they are, bf16 widened (exact); *_tail: the first k (< 16), zeros after.
  static float scalar(float f) { return f; }
  static float scalar(uint16_t h) { return bf16_to_f32(h); }
  static V widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static V load_w(const float* p) { return _mm512_loadu_ps(p); }
  static V load_w(const uint16_t* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static V load_w_tail(const float* p, int64_t k) { return _mm512_maskz_loadu_ps(mask(k), p); }
  static V load_w_tail(const uint16_t* p, int64_t k) { return widen(_mm256_maskz_loadu_epi16(mask(k), p)); }

  // dst[j*ldd + i] = src[i*lds + j] for a 16 x 16 block (unpack, in-lane shuffle, two lane shuffles).
  static void transpose(const float* src, int64_t lds, float* dst, int64_t ldd) {
    V r[16], t[16];
    for (int i = 0; i < 16; ++i) r[i] = load(src + i * lds);
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
      r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
      r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
      r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
      r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int h = 0; h < 16; h += 8)
      for (int j = 0; j < 4; ++j) {
        t[h + j] = _mm512_shuffle_f32x4(r[h + j], r[h + 4 + j], 0x88);
        t[h + 4 + j] = _mm512_shuffle_f32x4(r[h + j], r[h + 4 + j], 0xDD);
      }
    for (int j = 0; j < 8; ++j) {
      r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
      r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xDD);
    }
    for (int i = 0; i < 16; ++i) store(dst + i * ldd, r[i]);
  }
};

}  // namespace k3::simd
