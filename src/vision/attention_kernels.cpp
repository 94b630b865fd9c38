#include "base/cpu_features.h"

#define K3_VISION_VEC 4  // baseline SSE vectors (wider ones would change the ABI of the helpers)
#include "vision/attention_kernels_impl.h"

namespace k3 {

AttentionBlocking attention_blocking() {
  switch (active_isa()) {
    case Isa::kAmx:
    case Isa::kAvx512: return avx512::attention_blocking();
    case Isa::kAvx2: return avx2::attention_blocking();
    case Isa::kRef: break;
  }
  return ref::attention_blocking();
}

void attention_tile(const float* q, int64_t nq, const float* kt, const float* v, int64_t n, int hd, int hd_pad,
                    float scale, float* out, int64_t ldo, float* scratch) {
  switch (active_isa()) {
    case Isa::kAmx:
    case Isa::kAvx512: avx512::attention_tile(q, nq, kt, v, n, hd, hd_pad, scale, out, ldo, scratch); return;
    case Isa::kAvx2: avx2::attention_tile(q, nq, kt, v, n, hd, hd_pad, scale, out, ldo, scratch); return;
    case Isa::kRef: ref::attention_tile(q, nq, kt, v, n, hd, hd_pad, scale, out, ldo, scratch); return;
  }
}

int64_t attention_scratch_floats(int64_t nq, int hd_pad) {
  const AttentionBlocking b = attention_blocking();
  const int64_t rows = (nq + b.rows - 1) / b.rows * b.rows;
  return rows * (b.key_block + hd_pad + 1 + b.vec);  // s, o, m, l (see attention_kernels_impl.h)
}

namespace ref {
K3_VISION_DEFINE_ATTENTION_KERNELS
}  // namespace ref

}  // namespace k3
