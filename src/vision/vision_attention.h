// The tower's attention: bidirectional, multi-head, over images packed into one sequence and
// block-diagonal -- a patch attends only to the patches of its own image (cu_seqlens), exactly
// as if each image ran alone.  softmax(scale * q.k) v in fp32 with scale 1/sqrt(head_dim).
// packed_attention repacks each (head, image)'s keys (transposed) and values (padded) once, then
// runs flash-style tiles (attention_kernels.h) with one task per (image, head, tile of 64
// queries) on the global thread pool.  packed_attention_reference is the plain three-pass
// version (scores, softmax with std::exp, weighted sum) the tests compare against.
#pragma once

#include <cstdint>
#include <span>

namespace k3 {

// qkv: [N, 3 * heads * head_dim], rows q | k | v, each head-major (RoPE already applied).
// cu_seqlens: [images + 1] offsets into N.  out: [N, heads * head_dim].
void packed_attention(const float* qkv, std::span<const int64_t> cu_seqlens, int heads, int head_dim, float* out);
void packed_attention_reference(const float* qkv, std::span<const int64_t> cu_seqlens, int heads, int head_dim,
                                float* out);

}  // namespace k3
