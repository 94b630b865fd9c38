// Causal MLA attention for a prefill segment, blocked FlashAttention-style over the decompressed
// keys and values (per query, key and head it costs qk + vdim = 320 multiply-adds against the
// absorbed form's lora + width = 1088; decompressing a key costs heads x (nope + vdim) x lora once
// per segment, which the absorbed form spends on projecting each query instead).
//
//   q:     [len][heads][nope + rope]       the segment's queries (unscaled)
//   cache: [pos0 + len][lora + rope]       the latent cache, the segment's own rows included;
//                                          fp32, or bf16 bits widened exactly as they are read
//   kv_b:  [heads * (nope + vdim)][lora]   per head: nope rows W_UK, then vdim rows W_UV
//   o:     [len][ldo], head h at o[i*ldo + h*vdim]
// Token i (position pos0 + i) attends cache rows 0..pos0+i.
//
// Work is split by head over the thread pool.  Per head, the cache is walked in kKeyBlock-row
// blocks aligned at absolute positions 0, kKeyBlock, ...: each block is decompressed once
// (K = W_UK lat, V = W_UV lat, plus the cached rope part), then every query that sees it updates
// an online softmax (max, sum, unnormalised output).  A query's arithmetic depends only on its own
// row, its position and the cache rows it sees, in a fixed order, never on the tiling, the segment
// it arrived in or the thread count: a prompt prefilled in chunks gives the bits of one call.
#pragma once

#include <cstdint>

#include "kernels/matrix.h"

namespace k3 {

struct MlaPrefillShape {
  int heads, nope, rope, vdim, lora;
  int qk() const { return nope + rope; }
  int width() const { return lora + rope; }
};

// Dispatches on active_isa().
void mla_prefill_attention(const Matrix& kv_b, const MlaPrefillShape& s, const float* q, const float* cache,
                           int64_t pos0, int64_t len, float scale, float* o, int64_t ldo);
void mla_prefill_attention(const Matrix& kv_b, const MlaPrefillShape& s, const float* q, const uint16_t* cache_bf16,
                           int64_t pos0, int64_t len, float scale, float* o, int64_t ldo);

// Multiply-adds of the attention proper (scores and values over the causal triangle) and of the
// decompression, for the roofline.
double mla_prefill_attention_macs(const MlaPrefillShape& s, int64_t pos0, int64_t len);
double mla_prefill_decompress_macs(const MlaPrefillShape& s, int64_t pos0, int64_t len);
// The same segment in the absorbed form (mla_attention.h): lora + width per query, key and head,
// plus each query's projections through W_UK and W_UV (heads x (nope + vdim) x lora).
double mla_absorbed_attention_macs(const MlaPrefillShape& s, int64_t pos0, int64_t len);

// Whether this kernel beats the absorbed form for a segment: its work (attention plus
// decompression) against the absorbed form's, weighed by their measured speeds (`k3 bench
// --filter mla`: both run at 55-65% of the fp32 FMA peak, the blocked one a little slower).  For
// K3's shapes that is from ~200 new tokens deep in a long cache, ~40 for a fresh prompt.
bool mla_prefill_prefers_decompressed(const MlaPrefillShape& s, int64_t pos0, int64_t len);

namespace mla_prefill_detail {
inline constexpr int64_t kKeyBlock = 256;  // cache rows per block, aligned at absolute positions
inline constexpr int64_t kQueryTile = 48;  // queries per score / value product
}  // namespace mla_prefill_detail

// The same blocks in plain loops: the baseline-ISA level (Isa::kRef).
namespace portable {
void mla_prefill_attention(const Matrix& kv_b, const MlaPrefillShape& s, const float* q, const float* cache,
                           int64_t pos0, int64_t len, float scale, float* o, int64_t ldo);
void mla_prefill_attention(const Matrix& kv_b, const MlaPrefillShape& s, const float* q, const uint16_t* cache_bf16,
                           int64_t pos0, int64_t len, float scale, float* o, int64_t ldo);
}  // namespace portable
// The vector versions (mla_prefill_isa.cpp, one build per level).
namespace avx512 {
void mla_prefill_attention(const Matrix& kv_b, const MlaPrefillShape& s, const float* q, const float* cache,
                           int64_t pos0, int64_t len, float scale, float* o, int64_t ldo);
void mla_prefill_attention(const Matrix& kv_b, const MlaPrefillShape& s, const float* q, const uint16_t* cache_bf16,
                           int64_t pos0, int64_t len, float scale, float* o, int64_t ldo);
}  // namespace avx512
namespace avx2 {
void mla_prefill_attention(const Matrix& kv_b, const MlaPrefillShape& s, const float* q, const float* cache,
                           int64_t pos0, int64_t len, float scale, float* o, int64_t ldo);
void mla_prefill_attention(const Matrix& kv_b, const MlaPrefillShape& s, const float* q, const uint16_t* cache_bf16,
                           int64_t pos0, int64_t len, float scale, float* o, int64_t ldo);
}  // namespace avx2

}  // namespace k3
