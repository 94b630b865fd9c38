// AVX-512 traits for the dense linear kernels of linear_tiles.h (decode and few tokens; many
// tokens run the GEMM of linear_gemm_avx512.cpp) and the small GEMM; only called when the CPU
// has AVX-512 (base/cpu_features).
#include <immintrin.h>

#include "kernels/linear.h"
#include "kernels/small_gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>
#include "base/numeric_types.h"
#include "kernels/matrix.h"
#include "kernels/mxfp4.h"

// Everything below is compiled for this instruction set; the headers above (standard library
// included) keep the baseline target, so no shared inline code ever carries these instructions.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#include "kernels/linear_tiles.h"
#include "kernels/small_gemm_tiles.h"

namespace k3::avx512 {
namespace {

struct Traits {
  using V = __m512;
  static constexpr int kLanes = 16;
  // The blocked walk's tiles (linear_tiles.h), which AVX-512 never reaches for dense weights:
  // up to 7 tokens the streamed tiles below, from 8 on linear.cpp runs the GEMM.
  static constexpr int kDenseRows = 4, kDenseTokens = 6;  // 24 accumulators + 4 weights + 1 x
  static constexpr int kGemmRows = 3, kGemmVecs = 8;  // small_gemm_tiles.h
  // Few tokens (n < 8): rows streamed once (linear_tiles.h), 4 rows per tile for every token
  // count.  At 7 tokens that is 28 accumulators + 4 weights, the activations read as memory
  // operands of the FMAs; measured (12288 x 7168 bf16, 2 threads) 5.4-6.0 ms against 9.8 with
  // 3 rows per tile and 9.0-9.5 with the blocked walk.
  static constexpr int kStreamTokens = 7, kStreamMax = 7;
  static constexpr int stream_rows(int) { return 4; }

  static float scalar(float f) { return f; }
  static float scalar(uint16_t h) { return bf16_to_f32(h); }
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static float reduce(V v) { return _mm512_reduce_add_ps(v); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static __mmask16 mask(int64_t k) { return static_cast<__mmask16>((1u << k) - 1u); }
  static V load_tail(const float* p, int64_t k) { return _mm512_maskz_loadu_ps(mask(k), p); }
  static V load_w(const float* p) { return _mm512_loadu_ps(p); }
  static V load_w_tail(const float* p, int64_t k) { return _mm512_maskz_loadu_ps(mask(k), p); }
  static V widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static V load_w(const uint16_t* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static V load_w_tail(const uint16_t* p, int64_t k) { return widen(_mm256_maskz_loadu_epi16(mask(k), p)); }
};

}  // namespace

void linear_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  if (w.format == WeightFormat::kMxfp4) {
    linear_rows_mxfp4(w, x, n, y, r0, r1);
    return;
  }
  tiles::Linear<Traits>::rows(w, x, n, y, r0, r1);  // (n >= 8: linear_rows_gemm, called by linear.cpp)
}

void gemm_nn(const float* A, const float* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate) {
  tiles::SmallGemm<Traits>::run(A, B, C, m, k, n, accumulate);
}
void gemm_nn(const float* A, const uint16_t* B, float* C, int64_t m, int64_t k, int64_t n, bool accumulate) {
  tiles::SmallGemm<Traits>::run(A, B, C, m, k, n, accumulate);
}

}  // namespace k3::avx512
#pragma GCC pop_options
