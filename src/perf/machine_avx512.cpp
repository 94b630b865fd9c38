// AVX-512 probe loops (compiled for the AVX-512 + BF16 level, kernels/simd/isa.h).
#include <cstdint>
#include <string>

#include "perf/machine.h"

#include "kernels/simd/isa.h"
#define K3_ISA_LEVEL K3_ISA_AVX512BF16
#include "kernels/simd/isa_begin.h"

namespace k3::perf_isa {

uint64_t xor_bytes_avx512(const uint8_t* p, int64_t n) {
  // Four interleaved streams (quarters of the range), as a GEMV reads several rows at once: one
  // sequential stream leaves part of the bandwidth unused on some CPUs (Zen 5 among them).
  // Integer loads, so any bit pattern (weights included) reads at full speed.
  const int64_t q = n / 4;
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < q; i += 64) {
    a0 = _mm512_xor_si512(a0, _mm512_loadu_si512(p + i));
    a1 = _mm512_xor_si512(a1, _mm512_loadu_si512(p + q + i));
    a2 = _mm512_xor_si512(a2, _mm512_loadu_si512(p + 2 * q + i));
    a3 = _mm512_xor_si512(a3, _mm512_loadu_si512(p + 3 * q + i));
  }
  return static_cast<uint64_t>(_mm512_reduce_or_epi64(_mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3))));
}

double fma_loop_avx512(int64_t iters) {
  __m512 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_ps(0.001f * j);
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_fmadd_ps(acc[j], m, a);
  __m512 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, acc[j]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return static_cast<double>(iters) * 12 * 16 * 2;
}

double bf16_dot_loop_avx512(int64_t iters) {
  __m512 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_setzero_ps();
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3a80);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
  __m512 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, acc[j]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return static_cast<double>(iters) * 12 * 32 * 2;
}

}  // namespace k3::perf_isa

#include "kernels/simd/isa_end.h"
