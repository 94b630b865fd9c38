// SiTU-GLU / SiLU-GLU compiled for AVX2 (activation_simd.h); the tails use the scalar forms.
#include <immintrin.h>

#include <cstdint>

#include "kernels/activation.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "kernels/attention_simd_avx2.h"
#include "kernels/activation_simd.h"

namespace k3::avx2 {

void situ_glu(const float* g, const float* u, int64_t n, float b1, float b2, float* out) {
  const int64_t done = act_detail::Act<simd::Avx2>::situ_glu(g, u, n, b1, b2, out);
  ref::situ_glu(g + done, u + done, n - done, b1, b2, out + done);
}

void silu_glu(const float* g, const float* u, int64_t n, float* out) {
  const int64_t done = act_detail::Act<simd::Avx2>::silu_glu(g, u, n, out);
  ref::silu_glu(g + done, u + done, n - done, out + done);
}

}  // namespace k3::avx2
#pragma GCC pop_options
