// The tower's attention: bidirectional, multi-head, over images packed into one sequence and
// block-diagonal -- a patch attends only to the patches of its own image (cu_seqlens), exactly
// as if each image ran alone.  softmax(scale * q.k) v in fp32 with scale 1/sqrt(head_dim).
// Both products use vectorised kernels (attention_kernels.h for q k^T and the softmax,
// k3::linear for p v); each (image, head,
// block of queries) is a task on the global thread pool.
#pragma once

#include <cstdint>
#include <span>

namespace k3 {

// qkv: [N, 3 * heads * head_dim], rows q | k | v, each head-major (RoPE already applied).
// cu_seqlens: [images + 1] offsets into N.  out: [N, heads * head_dim].
void packed_attention(const float* qkv, std::span<const int64_t> cu_seqlens, int heads, int head_dim, float* out);

}  // namespace k3
