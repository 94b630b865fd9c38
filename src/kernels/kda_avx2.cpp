// The KDA recurrence (kda_step.h) compiled for AVX2.
#include "kernels/kda_step.h"

namespace k3::avx2 {
void kda_recurrent(const KdaHeadIO& io, int64_t T, int K, int V, float* state) {
  kda_detail::recurrent_kfirst(io, T, K, V, state);
}
}  // namespace k3::avx2
