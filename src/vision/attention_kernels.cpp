#include "base/cpu_features.h"
#include "vision/attention_kernels_impl.h"

namespace k3 {

void qk_scores(const float* q, int64_t nq, const float* kt, int64_t n, int hd, float* s) {
  switch (active_isa()) {
    case Isa::kAvx512: avx512::qk_scores(q, nq, kt, n, hd, s); return;
    case Isa::kAvx2: avx2::qk_scores(q, nq, kt, n, hd, s); return;
    case Isa::kRef: ref::qk_scores(q, nq, kt, n, hd, s); return;
  }
}

void softmax_rows(float* s, int64_t rows, int64_t n, float scale) {
  switch (active_isa()) {
    case Isa::kAvx512: avx512::softmax_rows(s, rows, n, scale); return;
    case Isa::kAvx2: avx2::softmax_rows(s, rows, n, scale); return;
    case Isa::kRef: ref::softmax_rows(s, rows, n, scale); return;
  }
}

namespace ref {
K3_VISION_DEFINE_ATTENTION_KERNELS
}  // namespace ref

}  // namespace k3
