// The AVX2 + FMA vector type: 8 fp32 lanes, the operations every kernel written over a vector
// type uses (activations, KDA, MLA decode, the dense linear tiles, the small GEMM), and the
// tile shapes of those kernels at this level (16 vector registers).  Included by
// simd/isa_begin.h for K3_ISA_LEVEL == K3_ISA_AVX2 only, inside the AVX2 target region.
#pragma once

#if K3_ISA_LEVEL != K3_ISA_AVX2
#error "kernels/simd/avx2.h is compiled for AVX2 only (include kernels/simd/isa_begin.h)"
#endif

#include "kernels/simd/exp.h"

namespace k3::simd {

struct Avx2 {
  using V = __m256;
  static constexpr int kLanes = 8;

  // ---- tile shapes ----
  // Dense linear (linear_tiles.h): blocked 3 rows x 4 tokens (12 accumulators + 3 weights + 1 x);
  // few tokens are streamed, R rows x T tokens (R x T + R + 1 registers) per pass of up to
  // kStreamTokens tokens, up to kStreamMax tokens; beyond, the blocked tiles.
  static constexpr int kDenseRows = 3, kDenseTokens = 4;
  static constexpr int kStreamTokens = 4, kStreamMax = 16;
  static constexpr int stream_rows(int tokens) { return tokens <= 2 ? 4 : 3; }
  static constexpr int kGemmRows = 2, kGemmVecs = 6;  // small_gemm_tiles.h
  static constexpr int kKdaRows = 4, kKdaVecs = 2;    // kda_chunk.h: 8 accumulators + 2 B vectors + 1 A
  // mla_attention_tiles.h: score tile 4 rows x 3 head vectors, value tile 4 heads x 3 latent
  // vectors: 12 of the 16 registers.
  static constexpr int kMlaRows = 4, kMlaVecs = 3;

  // ---- arithmetic ----
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float f) { return _mm256_set1_ps(f); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V abs(V a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  static V round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // |mag| with the sign of s (mag non-negative).
  static V copysign(V mag, V s) { return _mm256_or_ps(mag, _mm256_and_ps(s, _mm256_set1_ps(-0.0f))); }
  // a < b ? t : f, per lane.
  static V select_lt(V a, V b, V t, V f) { return _mm256_blendv_ps(f, t, _mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
  // The sum of the lanes, in a fixed order.
  static float reduce(V v) {
    __m128 lo = _mm256_castps256_ps128(v);
    lo = _mm_add_ps(lo, _mm256_extractf128_ps(v, 1));
    __m128 sh = _mm_movehdup_ps(lo);
    __m128 s = _mm_add_ps(lo, sh);
    sh = _mm_movehl_ps(sh, s);
    return _mm_cvtss_f32(_mm_add_ss(s, sh));
  }

  // e^x (simd/exp.h): 2^n built in the exponent field; inputs below the normal range
  // (x < -87.3) give 0 (the true value is below FLT_MIN).
  static V exp(V x) { return simd::exp<Avx2>(x); }
  static V exp_clamp(V x) { return min(max(x, set1(-87.3365f)), set1(88.3762626647949f)); }
  static V exp_scale(V y, V n, V x) {
    const V normal = _mm256_cmp_ps(x, set1(-87.3365f), _CMP_GE_OQ);
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(mul(y, _mm256_castsi256_ps(e)), normal);
  }

  // ---- memory ----
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  // The first n (< 8) floats at p, zeros after; reads nothing past p + n.
  static V load_first(const float* p, int n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane));
  }
  // Weights: fp32 as they are, bf16 widened (exact); *_tail: the first k (< 8), zeros after.
  static float scalar(float f) { return f; }
  static float scalar(uint16_t h) { return bf16_to_f32(h); }
  static V load_w(const float* p) { return _mm256_loadu_ps(p); }
  static V load_w(const uint16_t* p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
  template <typename T>
  static V tail_copy(const T* p, int64_t k) {
    T buf[8] = {};
    std::memcpy(buf, p, static_cast<size_t>(k) * sizeof(T));
    return load_w(buf);
  }
  static V load_tail(const float* p, int64_t k) { return tail_copy(p, k); }
  static V load_w_tail(const float* p, int64_t k) { return tail_copy(p, k); }
  static V load_w_tail(const uint16_t* p, int64_t k) { return tail_copy(p, k); }

  // dst[j*ldd + i] = src[i*lds + j] for an 8 x 8 block.
  static void transpose(const float* src, int64_t lds, float* dst, int64_t ldd) {
    V r[8], t[8];
    for (int i = 0; i < 8; ++i) r[i] = load(src + i * lds);
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
      r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
      r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
      r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
      r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int j = 0; j < 4; ++j) {
      t[j] = _mm256_permute2f128_ps(r[j], r[4 + j], 0x20);
      t[4 + j] = _mm256_permute2f128_ps(r[j], r[4 + j], 0x31);
    }
    for (int i = 0; i < 8; ++i) store(dst + i * ldd, t[i]);
  }
};

}  // namespace k3::simd
