// Sigmoid, SiLU, sigmoid gating, SiTU-GLU and SiLU-GLU compiled for AVX512 (activation_simd.h); every element, tails included, takes the vector path.
#include <immintrin.h>

#include <cstdint>

#include "kernels/activation.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#include "kernels/attention_simd_avx512.h"
#include "kernels/activation_simd.h"

namespace k3::avx512 {

void sigmoid(const float* x, int64_t n, float* out) {
  act_detail::Act<simd::Avx512>::sigmoid_times<false, false>(x, nullptr, n, out);
}

void silu(const float* x, int64_t n, float* out) {
  act_detail::Act<simd::Avx512>::sigmoid_times<true, false>(x, nullptr, n, out);
}

void mul_sigmoid(const float* x, const float* gate, int64_t n, float* out) {
  act_detail::Act<simd::Avx512>::sigmoid_times<false, true>(gate, x, n, out);
}

void situ_glu(const float* g, const float* u, int64_t n, float b1, float b2, float* out) {
  act_detail::Act<simd::Avx512>::situ_glu(g, u, n, b1, b2, out);
}

void silu_glu(const float* g, const float* u, int64_t n, float* out) {
  act_detail::Act<simd::Avx512>::silu_glu(g, u, n, out);
}

}  // namespace k3::avx512
#pragma GCC pop_options
