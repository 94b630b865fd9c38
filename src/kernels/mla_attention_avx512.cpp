// The absorbed MLA decode kernel (mla_attention_tiles.h) compiled for AVX512, 16 lanes.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/mla_attention.h"

// Everything below is compiled for this instruction set; the headers above (standard library
// included) keep the baseline target, so no shared inline code ever carries these instructions.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,prefer-vector-width=512")
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positive inside avx512fintrin.h
#include "kernels/attention_simd_avx512.h"
#include "kernels/mla_attention_tiles.h"

namespace k3::avx512 {

void mla_decode_attention(const float* q, const float* cache, int64_t n, int heads, int lora, int rope, float scale,
                          float* o_lat) {
  // score tile 8 rows x 3 head vectors, value tile 8 heads x 3 latent vectors: 24 of the 32 registers.
  mla_detail::Fast<simd::Avx512, 8, 3, 8, 3>::decode(q, cache, n, heads, lora, rope, scale, o_lat);
}

void mla_decode_attention(const float* q, const uint16_t* cache_bf16, int64_t n, int heads, int lora, int rope,
                          float scale, float* o_lat) {
  mla_detail::Fast<simd::Avx512, 8, 3, 8, 3>::decode(q, cache_bf16, n, heads, lora, rope, scale, o_lat);
}

}  // namespace k3::avx512
#pragma GCC pop_options
