// The dispatching KDA entry points (see kda.h): the fused token-by-token step and the chunked
// WY/UT form, both from kda_chunk.h compiled per instruction set.
#include "base/cpu_features.h"
#include "kernels/kda.h"

namespace k3 {

void kda_recurrent(const KdaHeadIO& io, int64_t T, int K, int V, float* state) {
  switch (active_isa()) {
    case Isa::kAmx:
    case Isa::kAvx512: avx512::kda_recurrent(io, T, K, V, state); return;
    case Isa::kAvx2: avx2::kda_recurrent(io, T, K, V, state); return;
    case Isa::kRef: ref::kda_recurrent(io, T, K, V, state); return;
  }
}

void kda_chunked(const KdaHeadIO& io, int64_t T, int K, int V, int chunk, float* state) {
  switch (active_isa()) {
    case Isa::kAmx:
    case Isa::kAvx512: avx512::kda_chunked(io, T, K, V, chunk, state); return;
    case Isa::kAvx2: avx2::kda_chunked(io, T, K, V, chunk, state); return;
    case Isa::kRef: ref::kda_chunked(io, T, K, V, chunk, state); return;
  }
}

}  // namespace k3
