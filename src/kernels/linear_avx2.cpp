// AVX2/FMA linear kernels for CPUs without AVX-512.  Same batch-invariance contract as
// linear.h: each dot product is one FMA chain over 8-column steps, a scalar-masked tail and a
// fixed horizontal sum.
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "kernels/linear.h"
#include "kernels/mxfp4.h"

namespace k3::avx2 {
namespace {

constexpr int kRowBlock = 4;

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  __m128 sh = _mm_movehdup_ps(lo);
  __m128 s = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, s);
  s = _mm_add_ss(s, sh);
  return _mm_cvtss_f32(s);
}

inline __m256 load_w(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load_w(const uint16_t* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

// Copies a partial block of fewer than 8 elements into a zero-padded buffer.
template <typename T>
inline __m256 load_w_tail(const T* p, int64_t k) {
  T buf[8] = {};
  std::memcpy(buf, p, static_cast<size_t>(k) * sizeof(T));
  return load_w(buf);
}
inline __m256 load_x_tail(const float* p, int64_t k) {
  float buf[8] = {};
  std::memcpy(buf, p, static_cast<size_t>(k) * sizeof(float));
  return _mm256_loadu_ps(buf);
}

template <typename T, int R>
inline void dense_dot(const T* const* rows, int64_t cols, const float* x, float* out) {
  __m256 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= cols; c += 8) {
    const __m256 xv = _mm256_loadu_ps(x + c);
    for (int i = 0; i < R; ++i) acc[i] = _mm256_fmadd_ps(load_w(rows[i] + c), xv, acc[i]);
  }
  if (c < cols) {
    const __m256 xv = load_x_tail(x + c, cols - c);
    for (int i = 0; i < R; ++i) acc[i] = _mm256_fmadd_ps(load_w_tail(rows[i] + c, cols - c), xv, acc[i]);
  }
  for (int i = 0; i < R; ++i) out[i] = hsum(acc[i]);
}

template <typename T>
void dense_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  const T* base = static_cast<const T*>(w.data);
  int64_t r = r0;
  for (; r + kRowBlock <= r1; r += kRowBlock) {
    const T* rows[kRowBlock];
    for (int i = 0; i < kRowBlock; ++i) rows[i] = base + (r + i) * w.cols;
    for (int64_t t = 0; t < n; ++t) {
      float out[kRowBlock];
      dense_dot<T, kRowBlock>(rows, w.cols, x + t * w.cols, out);
      for (int i = 0; i < kRowBlock; ++i) y[t * w.rows + r + i] = out[i];
    }
  }
  for (; r < r1; ++r) {
    const T* rows[1] = {base + r * w.cols};
    for (int64_t t = 0; t < n; ++t) dense_dot<T, 1>(rows, w.cols, x + t * w.cols, &y[t * w.rows + r]);
  }
}

// 8 nibbles -> 8 floats: magnitude from an 8-entry table, sign bit from bit 3.
inline __m256 decode8(__m256i nib, __m256 mag_lut) {
  const __m256 mag = _mm256_permutevar8x32_ps(mag_lut, _mm256_and_si256(nib, _mm256_set1_epi32(7)));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(nib, _mm256_set1_epi32(8)), 28);
  return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
}

template <int R>
inline void mxfp4_dot(const uint8_t* const* packed, const uint8_t* const* scales, int64_t cols, const float* xs,
                      __m256 lut, float* out) {
  __m256 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi32(0xf);
  for (int64_t g = 0; g < cols; g += 32) {
    const __m256 xe0 = _mm256_loadu_ps(xs + g), xe1 = _mm256_loadu_ps(xs + g + 8);
    const __m256 xo0 = _mm256_loadu_ps(xs + g + 16), xo1 = _mm256_loadu_ps(xs + g + 24);
    for (int i = 0; i < R; ++i) {
      const uint8_t* p = packed[i] + g / 2;
      const __m256i b0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
      const __m256i b1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)));
      __m256 t = _mm256_mul_ps(decode8(_mm256_and_si256(b0, low4), lut), xe0);
      t = _mm256_fmadd_ps(decode8(_mm256_and_si256(b1, low4), lut), xe1, t);
      t = _mm256_fmadd_ps(decode8(_mm256_srli_epi32(b0, 4), lut), xo0, t);
      t = _mm256_fmadd_ps(decode8(_mm256_srli_epi32(b1, 4), lut), xo1, t);
      acc[i] = _mm256_fmadd_ps(t, _mm256_set1_ps(e8m0_to_f32(scales[i][g / 32])), acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) out[i] = hsum(acc[i]);
}

void mxfp4_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  thread_local std::vector<float> xs;
  xs.resize(static_cast<size_t>(n * w.cols));
  for (int64_t t = 0; t < n; ++t) mxfp4_shuffle_activations(x + t * w.cols, w.cols, xs.data() + t * w.cols);
  const __m256 lut = _mm256_loadu_ps(kE2M1Values);  // the 8 magnitudes
  const uint8_t* pk = static_cast<const uint8_t*>(w.data);
  const int64_t pstride = w.cols / 2, sstride = w.cols / 32;
  int64_t r = r0;
  for (; r + kRowBlock <= r1; r += kRowBlock) {
    const uint8_t* rows[kRowBlock];
    const uint8_t* scl[kRowBlock];
    for (int i = 0; i < kRowBlock; ++i) {
      rows[i] = pk + (r + i) * pstride;
      scl[i] = w.scales + (r + i) * sstride;
    }
    for (int64_t t = 0; t < n; ++t) {
      float out[kRowBlock];
      mxfp4_dot<kRowBlock>(rows, scl, w.cols, xs.data() + t * w.cols, lut, out);
      for (int i = 0; i < kRowBlock; ++i) y[t * w.rows + r + i] = out[i];
    }
  }
  for (; r < r1; ++r) {
    const uint8_t* rows[1] = {pk + r * pstride};
    const uint8_t* scl[1] = {w.scales + r * sstride};
    for (int64_t t = 0; t < n; ++t) mxfp4_dot<1>(rows, scl, w.cols, xs.data() + t * w.cols, lut, &y[t * w.rows + r]);
  }
}

}  // namespace

void linear_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  switch (w.format) {
    case WeightFormat::kF32: dense_rows<float>(w, x, n, y, r0, r1); return;
    case WeightFormat::kBF16: dense_rows<uint16_t>(w, x, n, y, r0, r1); return;
    case WeightFormat::kMxfp4: mxfp4_rows(w, x, n, y, r0, r1); return;
  }
}

}  // namespace k3::avx2
