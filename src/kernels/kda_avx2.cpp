// The KDA recurrence (kda_step.h) compiled for AVX2.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/kda.h"

// Everything below is compiled for this instruction set; the headers above (standard library
// included) keep the baseline target, so no shared inline code ever carries these instructions.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "kernels/kda_step.h"

namespace k3::avx2 {
void kda_recurrent(const KdaHeadIO& io, int64_t T, int K, int V, float* state) {
  kda_detail::recurrent_kfirst(io, T, K, V, state);
}
}  // namespace k3::avx2
#pragma GCC pop_options
