// The dispatching KDA entry points (see kda.h): the per-level builds of kda_isa.cpp, or the
// portable ones of kda.cpp.
#include "base/cpu_features.h"
#include "kernels/kda.h"
#include "kernels/simd/dispatch.h"

namespace k3 {

void kda_recurrent(const KdaHeadIO& io, int64_t T, int K, int V, float* state) {
  K3_ISA_DISPATCH(active_isa(), kda_recurrent(io, T, K, V, state));
}

void kda_chunked(const KdaHeadIO& io, int64_t T, int K, int V, int chunk, float* state) {
  K3_ISA_DISPATCH(active_isa(), kda_chunked(io, T, K, V, chunk, state));
}

}  // namespace k3
