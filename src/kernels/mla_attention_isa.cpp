// The absorbed MLA decode kernel (mla_attention_tiles.h) over the level's vector type, compiled
// once per instruction-set level (kernels/simd/isa.h).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/mla_attention.h"

#include "kernels/simd/isa_begin.h"
#include "kernels/mla_attention_tiles.h"

namespace k3::K3_ISA_NS {
namespace {
using Fast = mla_detail::Fast<Vec, Vec::kMlaRows, Vec::kMlaVecs, Vec::kMlaRows, Vec::kMlaVecs>;
}  // namespace

void mla_decode_attention(const float* q, const float* cache, int64_t n, int heads, int lora, int rope, float scale,
                          float* o_lat) {
  Fast::decode(q, cache, n, heads, lora, rope, scale, o_lat);
}

void mla_decode_attention(const float* q, const uint16_t* cache_bf16, int64_t n, int heads, int lora, int rope,
                          float scale, float* o_lat) {
  Fast::decode(q, cache_bf16, n, heads, lora, rope, scale, o_lat);
}

}  // namespace k3::K3_ISA_NS

#include "kernels/simd/isa_end.h"
