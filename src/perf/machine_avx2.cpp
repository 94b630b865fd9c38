// AVX2 probe loops (compiled for the AVX2 level, kernels/simd/isa.h).
#include <cstdint>
#include <string>

#include "perf/machine.h"

#include "kernels/simd/isa.h"
#define K3_ISA_LEVEL K3_ISA_AVX2
#include "kernels/simd/isa_begin.h"

namespace k3::perf_isa {

uint64_t xor_bytes_avx2(const uint8_t* p, int64_t n) {
  // Four interleaved streams, as in xor_bytes_avx512.
  const int64_t q = n / 4;
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < q; i += 32) {
    a0 = _mm256_xor_si256(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + q + i)));
    a2 = _mm256_xor_si256(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * q + i)));
    a3 = _mm256_xor_si256(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 3 * q + i)));
  }
  const __m256i s = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  return static_cast<uint64_t>(_mm256_extract_epi64(s, 0) ^ _mm256_extract_epi64(s, 1) ^ _mm256_extract_epi64(s, 2) ^
                               _mm256_extract_epi64(s, 3));
}

double fma_loop_avx2(int64_t iters) {
  __m256 acc[10];
  for (int j = 0; j < 10; ++j) acc[j] = _mm256_set1_ps(0.001f * j);
  const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 10; ++j) acc[j] = _mm256_fmadd_ps(acc[j], m, a);
  __m256 s = acc[0];
  for (int j = 1; j < 10; ++j) s = _mm256_add_ps(s, acc[j]);
  alignas(32) float buf[8];
  _mm256_store_ps(buf, s);
  volatile float sink = buf[0];
  (void)sink;
  return static_cast<double>(iters) * 10 * 8 * 2;
}

}  // namespace k3::perf_isa

#include "kernels/simd/isa_end.h"
