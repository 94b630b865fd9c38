// Block Attention Residuals aggregation for one token (arXiv:2603.15031), fp32:
//   key_j = V_j * rsqrt(mean(V_j^2) + eps);  s_j = key_j . query;  h = sum_j softmax(s)_j V_j
// where query = res_norm.weight (.) res_proj.weight (the norm gain folded into the pseudo-query)
// and the values V_j are the raw (un-normalised) sources.
#pragma once

#include <cstdint>

namespace k3 {

// sources[j] points at source j's row (dim floats).  out must not alias a source.
void attn_res_mix(const float* const* sources, int num_sources, int64_t dim, const float* query, float eps, float* out);

}  // namespace k3
