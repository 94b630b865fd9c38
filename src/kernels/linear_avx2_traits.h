// The AVX2/FMA vector traits of the shared tile kernels (linear_tiles.h, small_gemm_tiles.h):
// 8 fp32 lanes.  Include only after `#pragma GCC target("avx2,fma,f16c")` (linear_avx2.cpp,
// linear_mxfp4_avx2.cpp), and every header it includes before that pragma.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "base/numeric_types.h"

namespace k3::avx2 {

struct Traits {
  using V = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kDenseRows = 3, kDenseTokens = 4;  // 12 accumulators + 3 weights + 1 x
  static constexpr int kGemmRows = 2, kGemmVecs = 6;  // small_gemm_tiles.h
  // Few tokens: rows streamed once per pass of up to kStreamTokens tokens (linear_tiles.h), R rows
  // x T tokens with R x T + R + 1 of the 16 registers; beyond kStreamMax tokens, the blocked 3 x 4
  // tiles.
  static constexpr int kStreamTokens = 4, kStreamMax = 16;
  static constexpr int stream_rows(int tokens) { return tokens <= 2 ? 4 : 3; }

  static float scalar(float f) { return f; }
  static float scalar(uint16_t h) { return bf16_to_f32(h); }
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float f) { return _mm256_set1_ps(f); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static float reduce(V v) {
    __m128 lo = _mm256_castps256_ps128(v);
    lo = _mm_add_ps(lo, _mm256_extractf128_ps(v, 1));
    __m128 sh = _mm_movehdup_ps(lo);
    __m128 s = _mm_add_ps(lo, sh);
    sh = _mm_movehl_ps(sh, s);
    return _mm_cvtss_f32(_mm_add_ss(s, sh));
  }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  template <typename T>
  static V tail_copy(const T* p, int64_t k) {
    T buf[8] = {};
    std::memcpy(buf, p, static_cast<size_t>(k) * sizeof(T));
    return load_w(buf);
  }
  static V load_tail(const float* p, int64_t k) { return tail_copy(p, k); }
  static V load_w(const float* p) { return _mm256_loadu_ps(p); }
  static V load_w(const uint16_t* p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
  static V load_w_tail(const float* p, int64_t k) { return tail_copy(p, k); }
  static V load_w_tail(const uint16_t* p, int64_t k) { return tail_copy(p, k); }
};

}  // namespace k3::avx2
