#include "base/cpu_features.h"
#include "kernels/simd/dispatch.h"

#define K3_VISION_VEC 4  // baseline SSE vectors (wider ones would change the ABI of the helpers)
#include "vision/attention_kernels_impl.h"

namespace k3 {

AttentionBlocking attention_blocking() { K3_ISA_DISPATCH(active_isa(), attention_blocking()); }

void attention_tile(const float* q, int64_t nq, const float* kt, const float* v, int64_t n, int hd, int hd_pad,
                    float scale, float* out, int64_t ldo, float* scratch) {
  K3_ISA_DISPATCH(active_isa(), attention_tile(q, nq, kt, v, n, hd, hd_pad, scale, out, ldo, scratch));
}

int64_t attention_scratch_floats(int64_t nq, int hd_pad) {
  const AttentionBlocking b = attention_blocking();
  const int64_t rows = (nq + b.rows - 1) / b.rows * b.rows;
  return rows * (b.key_block + hd_pad + 1 + b.vec);  // s, o, m, l (see attention_kernels_impl.h)
}

namespace portable {
K3_VISION_DEFINE_ATTENTION_KERNELS
}  // namespace portable

}  // namespace k3
