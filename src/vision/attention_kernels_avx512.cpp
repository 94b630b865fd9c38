// attention_kernels_impl.h's tile compiled for AVX-512.
#include <algorithm>
#include <bit>
#include <cstring>
#include <cstdint>

#include "vision/attention_kernels.h"

// Everything below is compiled for this instruction set; the headers above (standard library
// included) keep the baseline target, so no shared inline code ever carries these instructions.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,fma,avx2")
#define K3_VISION_VEC 16
#include "vision/attention_kernels_impl.h"

namespace k3::avx512 {
K3_VISION_DEFINE_ATTENTION_KERNELS
}  // namespace k3::avx512
#pragma GCC pop_options
