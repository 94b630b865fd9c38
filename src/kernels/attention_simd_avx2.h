// Vector operations shared by the attention kernels (chunked KDA, MLA decode) for AVX2
// (8 lanes).  Include it only after the file's `#pragma GCC target(...)` and after every standard
// header (<immintrin.h> included), so none of it is compiled for the baseline target.
#pragma once

namespace k3::simd {

struct Avx2 {
  using V = __m256;
  static constexpr int kLanes = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float f) { return _mm256_set1_ps(f); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  // The first n (< 8) floats at p, zeros after; reads nothing past p + n.
  static V load_first(const float* p, int n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane));
  }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V abs(V a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  // |mag| with the sign of s (mag non-negative).
  static V copysign(V mag, V s) { return _mm256_or_ps(mag, _mm256_and_ps(s, _mm256_set1_ps(-0.0f))); }
  // a < b ? t : f, per lane.
  static V select_lt(V a, V b, V t, V f) { return _mm256_blendv_ps(f, t, _mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
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
  // e^x as in attention_simd_avx512.h; 2^n built in the exponent field, inputs below the normal range (x < -87.3)
  // flushed to 0 (the true value is below FLT_MIN).
  static V exp(V x) {
    const V tiny = _mm256_cmp_ps(x, set1(-87.3365f), _CMP_GE_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, set1(-87.3365f)), set1(88.3762626647949f));
    const V n = _mm256_round_ps(mul(x, set1(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm256_fnmadd_ps(n, set1(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    V y = set1(1.9875691500e-4f);
    y = fma(y, r, set1(1.3981999507e-3f));
    y = fma(y, r, set1(8.3334519073e-3f));
    y = fma(y, r, set1(4.1665795894e-2f));
    y = fma(y, r, set1(1.6666665459e-1f));
    y = fma(y, r, set1(5.0000001201e-1f));
    y = fma(y, mul(r, r), _mm256_add_ps(r, set1(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(mul(y, _mm256_castsi256_ps(e)), tiny);
  }
};

}  // namespace k3::simd
