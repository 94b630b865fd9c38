// Softmax attention of one query over n key/value rows, fp32 with a max-subtracted softmax.
//   out = sum_s softmax_s(scale * q . K_s) V_s
// Gated MLA uses it in two forms: absorbed (K = V-prefix = the 576-wide latent cache rows, one
// "head" shared by all query heads) and naive (per-head decompressed K and V).
#pragma once

#include <cstdint>

namespace k3 {

// K_s at keys + s*ldk (dk values), V_s at values + s*ldv (dv values).  scratch: n floats.
void attend_one(const float* q, const float* keys, int64_t ldk, const float* values, int64_t ldv, int64_t n, int dk,
                int dv, float scale, float* out, float* scratch);

}  // namespace k3
