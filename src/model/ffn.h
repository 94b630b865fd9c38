// Feed-forward blocks: the dense GLU MLP (layer 0, shared experts) and K3's Stable LatentMoE
// (docs/architecture.md): fp32 sigmoid router with biased selection and unbiased,
// renormalised weights; routed experts run in the latent (routed_expert_down_proj), combined in
// fp32, routed_expert_norm, routed_expert_up_proj; plus the shared MLP on the full-width input.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/linear.h"
#include "model/weights.h"

namespace k3 {

class ExpertSource;

// y = down(act(gate x, up x)) for n rows; act is SiTU-GLU or SiLU-GLU per the config.  precision:
// that of the products (kernels/linear.h); moe_forward's routing is exact fp32 whatever it is.
void mlp_forward(const MlpWeights& w, const TextConfig& c, const float* x, int64_t n, float* y,
                 Precision precision = Precision::kF32);

// routes (optional): receives [n * top_k] selected experts in selection order.  experts
// (optional): where the routed experts' weights come from (model/weight_store.h: a cache of
// streamed experts, or checked on first use); without it, w.experts as bound.  layer: this
// layer's index, for that source.  guess (optional): experts that layer guess_layer is likely to
// choose, passed to the source once this layer's own experts are requested.
void moe_forward(const MoeWeights& w, const TextConfig& c, const float* x, int64_t n, float* y,
                 std::vector<int32_t>* routes = nullptr, ExpertSource* experts = nullptr, int layer = 0,
                 int guess_layer = -1, std::span<const int32_t> guess = {}, Precision precision = Precision::kF32);

// The experts the router of `w` would choose for any of n rows of x (union, index order): the
// next-layer guess above, made with that layer's router on this layer's input.
std::vector<int32_t> guess_experts(const MoeWeights& w, const TextConfig& c, const float* x, int64_t n);

}  // namespace k3
