// AVX-512 linear kernels.  Every (row, token) dot product runs the same instruction sequence
// (one fp32 FMA chain over 16-column steps, a masked tail, one horizontal sum), whatever n and
// the row blocking are, which keeps results independent of the batch (see linear.h).
#include <immintrin.h>

#include <vector>

#include "kernels/linear.h"
#include "kernels/mxfp4.h"

namespace k3::avx512 {
namespace {

constexpr int kRowBlock = 4;

inline __m512 load_w(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load_w(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
inline __m512 load_w_tail(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load_w_tail(const uint16_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

// Dense (f32 / bf16) rows: R rows at once against one token.
template <typename T, int R>
inline void dense_dot(const T* const* rows, int64_t cols, const float* x, float* out) {
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    const __m512 xv = _mm512_loadu_ps(x + c);
    for (int i = 0; i < R; ++i) acc[i] = _mm512_fmadd_ps(load_w(rows[i] + c), xv, acc[i]);
  }
  if (c < cols) {
    const __mmask16 m = static_cast<__mmask16>((1u << (cols - c)) - 1u);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + c);
    for (int i = 0; i < R; ++i) acc[i] = _mm512_fmadd_ps(load_w_tail(rows[i] + c, m), xv, acc[i]);
  }
  for (int i = 0; i < R; ++i) out[i] = _mm512_reduce_add_ps(acc[i]);
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

// MXFP4 rows against one pre-shuffled token (see mxfp4_shuffle_activations).
template <int R>
inline void mxfp4_dot(const uint8_t* const* packed, const uint8_t* const* scales, int64_t cols, const float* xs,
                      __m512 lut, float* out) {
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  const __m512i low4 = _mm512_set1_epi32(0xf);
  for (int64_t g = 0; g < cols; g += 32) {
    const __m512 xe = _mm512_loadu_ps(xs + g);
    const __m512 xo = _mm512_loadu_ps(xs + g + 16);
    for (int i = 0; i < R; ++i) {
      const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed[i] + g / 2)));
      const __m512 wl = _mm512_permutexvar_ps(_mm512_and_si512(b, low4), lut);
      const __m512 wh = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), lut);
      __m512 t = _mm512_mul_ps(wl, xe);
      t = _mm512_fmadd_ps(wh, xo, t);
      acc[i] = _mm512_fmadd_ps(t, _mm512_set1_ps(e8m0_to_f32(scales[i][g / 32])), acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) out[i] = _mm512_reduce_add_ps(acc[i]);
}

void mxfp4_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  thread_local std::vector<float> xs;
  xs.resize(static_cast<size_t>(n * w.cols));
  for (int64_t t = 0; t < n; ++t) mxfp4_shuffle_activations(x + t * w.cols, w.cols, xs.data() + t * w.cols);
  const __m512 lut = _mm512_loadu_ps(kE2M1Values);
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

}  // namespace k3::avx512
