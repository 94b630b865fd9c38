// AVX2/FMA traits for the blocked linear kernel (linear_tiles.h), for CPUs without AVX-512.
#include <immintrin.h>

#include <cstring>

#include "kernels/linear.h"
#include "kernels/small_gemm.h"

#include <algorithm>
#include <cstdint>
#include <vector>
#include "base/numeric_types.h"
#include "kernels/matrix.h"
#include "kernels/mxfp4.h"

// Everything below is compiled for this instruction set; the headers above (standard library
// included) keep the baseline target, so no shared inline code ever carries these instructions.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "kernels/linear_tiles.h"
#include "kernels/small_gemm_tiles.h"

namespace k3::avx2 {
namespace {

struct Traits {
  using V = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kDenseRows = 3, kDenseTokens = 4;  // 12 accumulators + 3 weights + 1 x
  static constexpr int kMxRows = 2, kMxTokens = 2;
  static constexpr int kGemmRows = 2, kGemmVecs = 6;  // small_gemm_tiles.h
  static constexpr int kGroupVecs = 4;  // even cols 0-7, 8-15, then odd cols 0-7, 8-15

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
  // 8 nibbles -> 8 floats: magnitude from the 8-entry table, sign from bit 3.
  static V decode8(__m256i nib) {
    const __m256 mag = _mm256_permutevar8x32_ps(_mm256_loadu_ps(kE2M1Values), _mm256_and_si256(nib, _mm256_set1_epi32(7)));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(nib, _mm256_set1_epi32(8)), 28);
    return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
  }
  static void decode_group(const uint8_t* p, V* out) {
    const __m256i b0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i b1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)));
    const __m256i low4 = _mm256_set1_epi32(0xf);
    out[0] = decode8(_mm256_and_si256(b0, low4));
    out[1] = decode8(_mm256_and_si256(b1, low4));
    out[2] = decode8(_mm256_srli_epi32(b0, 4));
    out[3] = decode8(_mm256_srli_epi32(b1, 4));
  }
};

}  // namespace

void linear_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  tiles::Linear<Traits>::rows(w, x, n, y, r0, r1);
}

void gemm_nn(const float* A, const float* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate) {
  tiles::SmallGemm<Traits>::run(A, B, C, m, k, n, accumulate);
}
void gemm_nn(const float* A, const uint16_t* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate) {
  tiles::SmallGemm<Traits>::run(A, B, C, m, k, n, accumulate);
}

}  // namespace k3::avx2
#pragma GCC pop_options
