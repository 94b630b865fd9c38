// attention_kernels_impl.h's loops compiled for AVX-512.
#include "vision/attention_kernels_impl.h"

namespace k3::avx512 {
K3_VISION_DEFINE_ATTENTION_KERNELS
}  // namespace k3::avx512
