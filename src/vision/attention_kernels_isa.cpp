// attention_kernels_impl.h's tile compiled once per instruction-set level (kernels/simd/isa.h),
// its vectors as wide as the level's.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "vision/attention_kernels.h"

#include "kernels/simd/isa_begin.h"
#define K3_VISION_VEC (::k3::K3_ISA_NS::Vec::kLanes)
#include "vision/attention_kernels_impl.h"

namespace k3::K3_ISA_NS {
K3_VISION_DEFINE_ATTENTION_KERNELS
}  // namespace k3::K3_ISA_NS

#include "kernels/simd/isa_end.h"
