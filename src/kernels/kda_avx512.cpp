// The KDA kernels compiled for AVX-512: the plain recurrence (kda_step.h, for odd widths), the
// fused decode step and the chunked prefill (kda_chunk.h) over 16-lane traits.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/kda.h"

// Everything below is compiled for this instruction set; the headers above (standard library
// included) keep the baseline target, so no shared inline code ever carries these instructions.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positive inside avx512fintrin.h
#include "kernels/kda_chunk.h"
#include "kernels/kda_step.h"

namespace k3::avx512 {
namespace {

struct Traits {
  using V = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kRows = 6, kVecs = 4;  // GEMM tile: 24 accumulators + 4 B vectors + 1 A
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
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

using Fast = kda_detail::Fast<Traits>;

}  // namespace

void kda_recurrent(const KdaHeadIO& io, int64_t T, int K, int V, float* state) {
  if (V % Traits::kLanes == 0) Fast::recurrent(io, T, K, V, state);
  else kda_detail::recurrent_kfirst(io, T, K, V, state);
}

void kda_chunked(const KdaHeadIO& io, int64_t T, int K, int V, int chunk, float* state) {
  Fast::chunked(io, T, K, V, chunk, state);
}

}  // namespace k3::avx512
#pragma GCC pop_options
