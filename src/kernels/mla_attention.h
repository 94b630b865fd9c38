// Absorbed MLA attention for one query token and all heads over the latent cache (MQA with a
// 576-wide key, whose first kv_lora entries are also the value):
//   s[h, j] = scale * q[h] . cache[j];   p = softmax_j(s[h, :]);   o[h] = sum_j p[h, j] cache[j, :lora]
// q: [H][lora + rope], cache: [n][lora + rope], o_lat: [H][lora].  The cache is read once per
// call in blocks, with an online softmax; both products run on the blocked linear kernels.
#pragma once

#include <cstdint>

namespace k3 {

void mla_decode_attention(const float* q, const float* cache, int64_t n, int heads, int lora, int rope, float scale,
                          float* o_lat);

}  // namespace k3
