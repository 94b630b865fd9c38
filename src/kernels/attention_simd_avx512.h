// Vector operations shared by the attention kernels (chunked KDA, MLA decode) for AVX-512
// (16 lanes).  Include it only after the file's `#pragma GCC target(...)` and after every standard
// header (<immintrin.h> included), so none of it is compiled for the baseline target.
#pragma once

namespace k3::simd {

struct Avx512 {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  // The first n (< 16) floats at p, zeros after; reads nothing past p + n.
  static V load_first(const float* p, int n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), p);
  }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V abs(V a) { return _mm512_abs_ps(a); }
  // |mag| with the sign of s (mag non-negative).
  static V copysign(V mag, V s) {
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(mag), _mm512_castps_si512(s),
                                                         _mm512_set1_epi32(INT32_MIN), 0xD8));
  }
  // a < b ? t : f, per lane.
  static V select_lt(V a, V b, V t, V f) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), f, t); }
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
  // e^x: n = round(x log2 e), r = x - n ln2 (two-part ln2), Cephes' degree-6 polynomial for e^r,
  // then scalef by 2^n (exact; it underflows to 0 / overflows to inf like the true value).
  static V exp(V x) {
    x = _mm512_min_ps(_mm512_max_ps(x, set1(-150.0f)), set1(100.0f));
    const V n = _mm512_roundscale_ps(mul(x, set1(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm512_fnmadd_ps(n, set1(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    V y = set1(1.9875691500e-4f);
    y = fma(y, r, set1(1.3981999507e-3f));
    y = fma(y, r, set1(8.3334519073e-3f));
    y = fma(y, r, set1(4.1665795894e-2f));
    y = fma(y, r, set1(1.6666665459e-1f));
    y = fma(y, r, set1(5.0000001201e-1f));
    y = fma(y, mul(r, r), _mm512_add_ps(r, set1(1.0f)));
    return _mm512_scalef_ps(y, n);
  }
};

}  // namespace k3::simd
