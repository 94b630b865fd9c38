// The KDA kernels compiled for AVX-512: the plain recurrence (kda_step.h, for odd widths), the
// fused decode step and the chunked prefill (kda_chunk.h) over 16-lane traits.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/aligned.h"
#include "kernels/kda.h"

// Everything below is compiled for this instruction set; the headers above (standard library
// included) keep the baseline target, so no shared inline code ever carries these instructions.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,prefer-vector-width=512")
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positive inside avx512fintrin.h
#include "kernels/attention_simd_avx512.h"
#include "kernels/kda_chunk.h"
#include "kernels/kda_step.h"

namespace k3::avx512 {
namespace {

struct Traits : simd::Avx512 {
  static constexpr int kRows = 6, kVecs = 4;  // GEMM tile: 24 accumulators + 4 B vectors + 1 A
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
