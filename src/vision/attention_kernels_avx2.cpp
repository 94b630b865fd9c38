// attention_kernels_impl.h's tile compiled for AVX2 + FMA.
#include <algorithm>
#include <bit>
#include <cstring>
#include <cstdint>

#include "vision/attention_kernels.h"

// Everything below is compiled for this instruction set; the headers above (standard library
// included) keep the baseline target, so no shared inline code ever carries these instructions.
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define K3_VISION_VEC 8
#include "vision/attention_kernels_impl.h"

namespace k3::avx2 {
K3_VISION_DEFINE_ATTENTION_KERNELS
}  // namespace k3::avx2
#pragma GCC pop_options
