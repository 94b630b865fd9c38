// The KDA kernels over the level's vector type, compiled once per instruction-set level
// (kernels/simd/isa.h): the plain recurrence (kda_step.h, for widths that are not whole vectors),
// the fused decode step and the chunked prefill (kda_chunk.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/aligned.h"
#include "kernels/kda.h"

#include "kernels/simd/isa_begin.h"
#include "kernels/kda_chunk.h"
#include "kernels/kda_step.h"

namespace k3::K3_ISA_NS {

void kda_recurrent(const KdaHeadIO& io, int64_t T, int K, int V, float* state) {
  if (V % Vec::kLanes == 0) kda_detail::Fast<Vec>::recurrent(io, T, K, V, state);
  else kda_detail::recurrent_kfirst(io, T, K, V, state);
}

void kda_chunked(const KdaHeadIO& io, int64_t T, int K, int V, int chunk, float* state) {
  kda_detail::Fast<Vec>::chunked(io, T, K, V, chunk, state);
}

}  // namespace k3::K3_ISA_NS

#include "kernels/simd/isa_end.h"
