// Absorbed MLA attention for one query token and all heads over the latent cache (MQA with a
// 576-wide key, whose first kv_lora entries are also the value):
//   s[h, j] = scale * q[h] . cache[j];   p = softmax_j(s[h, :]);   o[h] = sum_j p[h, j] cache[j, :lora]
// q: [H][lora + rope], cache: [n][lora + rope] (n >= 1), o_lat: [H][lora].  The cache is split
// into fixed tasks of mla_detail::task_rows(n) rows (run over the thread pool), each read once in
// blocks with an online softmax for all heads; the tasks' partial softmaxes are merged in task
// order, so the result does not depend on the thread count.  The fast versions
// (mla_attention_tiles.h) run both products as register-blocked micro-kernels.
//
// The cache may be bf16 (cache_bf16: the same rows as bf16 bits): each block of rows is widened
// to fp32 (exact) just before its products, so the result equals the fp32 kernel on the widened
// cache bit for bit.
#pragma once

#include <cstdint>

namespace k3 {

// Dispatches on active_isa().
void mla_decode_attention(const float* q, const float* cache, int64_t n, int heads, int lora, int rope, float scale,
                          float* o_lat);
void mla_decode_attention(const float* q, const uint16_t* cache_bf16, int64_t n, int heads, int lora, int rope,
                          float scale, float* o_lat);

// The baseline-ISA level (Isa::kRef): blocked like the fast versions, with small_gemm products.
namespace portable {
void mla_decode_attention(const float* q, const float* cache, int64_t n, int heads, int lora, int rope, float scale,
                          float* o_lat);
void mla_decode_attention(const float* q, const uint16_t* cache_bf16, int64_t n, int heads, int lora, int rope,
                          float scale, float* o_lat);
}
// The vector versions (mla_attention_isa.cpp, one build per level).
namespace avx512 {
void mla_decode_attention(const float* q, const float* cache, int64_t n, int heads, int lora, int rope, float scale,
                          float* o_lat);
void mla_decode_attention(const float* q, const uint16_t* cache_bf16, int64_t n, int heads, int lora, int rope,
                          float scale, float* o_lat);
}
namespace avx2 {
void mla_decode_attention(const float* q, const float* cache, int64_t n, int heads, int lora, int rope, float scale,
                          float* o_lat);
void mla_decode_attention(const float* q, const uint16_t* cache_bf16, int64_t n, int heads, int lora, int rope,
                          float scale, float* o_lat);
}

// Shared by the implementations.
namespace mla_detail {
// Cache rows per task: about 8 tasks in whole 256-row blocks, 256 to 1024 rows.  A function of
// the context length only, never of the thread count, so results do not depend on the threads;
// short contexts still spread over the cores (1024 rows per task would leave a 1k context on one
// core), long ones keep the partial outputs to merge few.
inline int64_t task_rows(int64_t n) {
  const int64_t rows = (n / 8 + 255) / 256 * 256;
  return rows < 256 ? 256 : rows > 1024 ? 1024 : rows;
}
// Task t's partial softmax: max m[t*ld_ml + h], sum l[t*ld_ml + h], unnormalised output
// o[t*ld_task + h*ldo + c]; merged in task order into o_lat [heads][lora].
void merge_tasks(const float* m, const float* l, int64_t ld_ml, const float* o, int64_t ld_task, int64_t ldo,
                 int64_t tasks, int heads, int lora, float* o_lat);
}  // namespace mla_detail

}  // namespace k3
