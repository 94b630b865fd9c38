// Absorbed MLA attention for one query token and all heads over the latent cache (MQA with a
// 576-wide key, whose first kv_lora entries are also the value):
//   s[h, j] = scale * q[h] . cache[j];   p = softmax_j(s[h, :]);   o[h] = sum_j p[h, j] cache[j, :lora]
// q: [H][lora + rope], cache: [n][lora + rope] (n >= 1), o_lat: [H][lora].  The cache is split
// into fixed tasks of mla_detail::kTaskRows rows (run over the thread pool), each read once in
// blocks with an online softmax for all heads; the tasks' partial softmaxes are merged in task
// order, so the result does not depend on the thread count.  The fast versions
// (mla_attention_tiles.h) run both products as register-blocked micro-kernels.
#pragma once

#include <cstdint>

namespace k3 {

// Dispatches on active_isa().
void mla_decode_attention(const float* q, const float* cache, int64_t n, int heads, int lora, int rope, float scale,
                          float* o_lat);

namespace ref {  // the plain blocked version (small_gemm products)
void mla_decode_attention(const float* q, const float* cache, int64_t n, int heads, int lora, int rope, float scale,
                          float* o_lat);
}
namespace avx512 {
void mla_decode_attention(const float* q, const float* cache, int64_t n, int heads, int lora, int rope, float scale,
                          float* o_lat);
}
namespace avx2 {
void mla_decode_attention(const float* q, const float* cache, int64_t n, int heads, int lora, int rope, float scale,
                          float* o_lat);
}

// Shared by the implementations.
namespace mla_detail {
constexpr int64_t kTaskRows = 1024;  // cache rows per task (fixed: results do not depend on threads)
// Task t's partial softmax: max m[t*ld_ml + h], sum l[t*ld_ml + h], unnormalised output
// o[t*ld_task + h*ldo + c]; merged in task order into o_lat [heads][lora].
void merge_tasks(const float* m, const float* l, int64_t ld_ml, const float* o, int64_t ld_task, int64_t ldo,
                 int64_t tasks, int heads, int lora, float* o_lat);
}  // namespace mla_detail

}  // namespace k3
