// The vision tower's attention inner loop: one tile of queries of one head against all keys of
// its image, flash-style -- keys in blocks, scores of a block kept in cache, an online softmax
// (running maximum and sum, earlier output rescaled when the maximum grows), and the p.v product
// accumulated per block, so the [queries, keys] score matrix never exists.  Products are
// register-blocked micro-tiles (4 query rows x 64 keys / 4 rows x 64 output columns under
// AVX-512); exp is a polynomial (Cephes expf: within 2 ulp of expf on [-87, 0]).
// attention_kernels.cpp compiles the loops as the portable build (4-wide, baseline ISA),
// attention_kernels_isa.cpp once per instruction-set level with wider vectors (run-time dispatch
// on active_isa(), like src/kernels).  The
// blocking is relative to each call's own queries and keys (one image), so an image's result
// does not depend on what is packed with it.
#pragma once

#include <cstdint>

namespace k3 {

// The layout attention_tile() expects on the active ISA.
struct AttentionBlocking {
  int rows;       // q rows are processed in multiples of this (pad q with finite rows)
  int key_block;  // keys are read in blocks of this (pad kt columns / v rows with zeros)
  int vec;        // hd_pad must be a multiple of this
};

// q:  [round_up(nq, rows), hd]     the queries (rows past nq: any finite values)
// kt: keys transposed per block of key_block keys: [blocks][hd][key_block] (key j, dimension d
//     at ((j / key_block) * hd + d) * key_block + j % key_block), zero past n
// v:  [round_up(n, key_block), hd_pad] values, zero past n and past hd
// out[i * ldo + d] = softmax_j(scale * q_i . k_j) . v_j[d] for i < nq, d < hd.
// scratch: attention_scratch_floats(nq, hd_pad) floats.
AttentionBlocking attention_blocking();
void attention_tile(const float* q, int64_t nq, const float* kt, const float* v, int64_t n, int hd, int hd_pad,
                    float scale, float* out, int64_t ldo, float* scratch);
int64_t attention_scratch_floats(int64_t nq, int hd_pad);

namespace portable {
AttentionBlocking attention_blocking();
void attention_tile(const float* q, int64_t nq, const float* kt, const float* v, int64_t n, int hd, int hd_pad,
                    float scale, float* out, int64_t ldo, float* scratch);
}  // namespace portable
namespace avx2 {
AttentionBlocking attention_blocking();
void attention_tile(const float* q, int64_t nq, const float* kt, const float* v, int64_t n, int hd, int hd_pad,
                    float scale, float* out, int64_t ldo, float* scratch);
}  // namespace avx2
namespace avx512 {
AttentionBlocking attention_blocking();
void attention_tile(const float* q, int64_t nq, const float* kt, const float* v, int64_t n, int hd, int hd_pad,
                    float scale, float* out, int64_t ldo, float* scratch);
}  // namespace avx512

}  // namespace k3
