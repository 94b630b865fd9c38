// The KDA kernels compiled for AVX2: the plain recurrence (kda_step.h, for odd widths), the
// fused decode step and the chunked prefill (kda_chunk.h) over 8-lane traits.
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
#pragma GCC target("avx2,fma,f16c")
#include "kernels/attention_simd_avx2.h"
#include "kernels/kda_chunk.h"
#include "kernels/kda_step.h"

namespace k3::avx2 {
namespace {

struct Traits : simd::Avx2 {
  static constexpr int kRows = 4, kVecs = 2;  // GEMM tile: 8 accumulators + 2 B vectors + 1 A
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

}  // namespace k3::avx2
#pragma GCC pop_options
