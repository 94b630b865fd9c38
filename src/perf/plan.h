// k3 plan: what the weight store (model/weight_store.h) makes of a checkpoint at a byte budget
// on a machine described by three figures (disk read bandwidth, memory read bandwidth, fp32
// peak): decode and prefill tokens/s, where a decoded token's time goes, the expert cache's hit
// rate and the peak RSS.  A pure function of its inputs, so it predicts machines k3 is not
// running on (k3 plan --preset-machine c-engine) and is unit-tested without measuring anything.
//
// The model, per budget (L = MoE layers, k = top_k, E = experts per layer, N = all routed
// experts = L x E, e = the bytes of one expert as read, T = the trunk's bytes: every matrix but
// the routed experts, the lm_head included, the embedding (read a row per token) not):
//
//  Hit rate h.  Uniform routing by default: each expert equally likely, so a cache of S slots
//    holds a chosen expert with probability h = min(1, S / N) in steady state; --hit-rate
//    overrides it for skewed routing (capped at 1, and 1 whenever every expert has a slot).
//
//  Decode (one token, one sequence).  A GEMV over B bytes of weights and P parameters takes
//    gemv(B, P, eff) = max(B / (mem x eff), 2P / fp32_peak): bf16 GEMVs reach eff = 0.9 of the
//    memory bandwidth, MXFP4 expert GEMVs eff = 0.5 (exact fp32 decode of MXFP4 is bound by
//    instructions, not bytes).
//      trunk   = gemv(T, trunk params, bf16 eff)                      resident trunk
//              = max(S / disk, gemv(T, trunk params, bf16 eff))       S streamed bytes (the units
//                                                                      not kept resident): reads of
//                                                                      the next layers overlap compute
//      experts = max((1 - h) k L e / disk, gemv(k L e, k L expert params, mxfp4 eff))
//                (a layer's misses are read after its router has run, on the critical path, and
//                its experts are computed in groups as their bytes land: the products of the
//                groups already read hide under the reads still in flight, and the other way round)
//      time    = trunk + experts;  tokens/s = 1 / time.
//    Where the time goes: a term bounded by the disk counts as disk; a GEMV's B / mem counts as
//    memory and the rest of its time (what its efficiency or the FLOP rate adds) as compute.  A
//    streamed trunk, or a layer's expert misses, whose read takes longer than the GEMVs counts
//    wholly as disk (the GEMVs hide under the read), else wholly as its GEMVs.
//    Left out (small next to the weights at short contexts): attention over the context, the
//    KDA state update (~2 x 443 MiB of fp32 state per token at K3 width), the router, the
//    embedding row, thread synchronisation.
//
//  Prefill of P prompt tokens in chunks of C (256): each chunk of c tokens reads the trunk once
//    (from disk too when streamed) and touches D = E (1 - (1 - k/E)^c) distinct experts per MoE
//    layer, of which (1 - h) come from disk; its arithmetic, 2 x active params x c FLOP, runs at
//    prefill_eff (0.6) of fp32_peak:
//      trunk   = max(S / disk, T / (mem x bf16 eff), 2 trunk params c / (peak x prefill_eff))
//      experts = max((1 - h) L D e / disk, L D e / (mem x mxfp4 eff), 2 k L expert params c / (peak x prefill_eff))
//    tokens/s = P / (sum over the chunks).
//
//  Peak RSS = the budget in use + overhead, where
//    budget in use = (resident ? T : ring) + S x slot bytes
//    overhead      = 650 B x tensors in the checkpoint   (headers, tensor table, bound metadata)
//                  + one sequence's KDA state and conv history
//                  + the MLA latent cache of the P prompt tokens
//                  + activations of one chunk: C x 4 B x ((AttnRes blocks + 4) x hidden + 2 x the
//                    widest projection: max(dense intermediate, k x expert width, 3 x KDA width,
//                    MLA heads x (nope + rope + v)))
//                  + 64 MiB for the process itself (code, libraries, thread stacks, allocator).
#pragma once

#include <cstdint>
#include <string>

#include "model/weight_store.h"

namespace k3 {

struct ModelConfig;
struct ModelWeights;
class Checkpoint;

// The machine the prediction is for.
struct MachineFigures {
  double disk_gbps = 0;    // sequential read of the checkpoint's files, GB/s (1e9 bytes)
  double mem_gbps = 0;     // streaming memory read, all cores, GB/s
  double fp32_gflops = 0;  // fp32 FMA peak, all cores
  double bf16_gemv_eff = 0.9;   // bf16 GEMV speed as a fraction of mem_gbps
  double mxfp4_gemv_eff = 0.5;  // MXFP4 expert GEMV speed as a fraction of mem_gbps
  double prefill_eff = 0.6;     // prefill GEMM speed as a fraction of fp32_gflops
  uint64_t ram_bytes = 0;  // memory the weights may use there (0: unknown); budgets past it are flagged
  int cores = 0;           // informational
};

// What the model needs of the checkpoint besides the weight store's layout (model_figures()).
struct ModelFigures {
  int top_k = 0;
  int moe_layers = 0;
  int experts_per_layer = 0;
  uint64_t trunk_params = 0;   // parameters a token uses outside the routed experts, embedding excluded
  uint64_t expert_params = 0;  // one routed expert (gate + up + down)
  uint64_t tensor_count = 0;   // tensors in the checkpoint
  uint64_t sequence_state_bytes = 0;       // one sequence's KDA state and conv history
  uint64_t context_bytes_per_token = 0;    // MLA latent cache per token of context
  uint64_t activation_bytes_per_token = 0; // working buffers per token of a forward chunk

  uint64_t active_params() const {
    return trunk_params + static_cast<uint64_t>(top_k) * static_cast<uint64_t>(moe_layers) * expert_params;
  }
};

struct PlanOptions {
  double hit_rate = -1;      // < 0: uniform routing (slots / experts)
  int prompt_tokens = 512;   // prefill length
  int chunk_tokens = 256;    // prefill chunk
  uint64_t metadata_bytes_per_tensor = 650;
  uint64_t process_bytes = uint64_t{64} << 20;
};

// Seconds of one token (decode) or one prompt (prefill), by what bounds them.
struct TimeSplit {
  double disk = 0, memory = 0, compute = 0;
  double total() const { return disk + memory + compute; }
};

struct BudgetPlan {
  uint64_t budget = 0;
  bool feasible = false;  // budget >= layout.minimum_budget; else only the overhead below is set
  WeightStoreStats layout;
  double hit_rate = 0;
  double expert_requests_per_token = 0;  // k x L
  double expert_misses_per_token = 0;
  double disk_bytes_per_token = 0;       // streamed trunk + missed experts
  TimeSplit decode;
  double decode_seconds = 0, decode_tokens_per_second = 0;
  TimeSplit prefill;
  double prefill_seconds = 0, prefill_tokens_per_second = 0;
  uint64_t weight_bytes = 0;  // the budget in use: resident trunk or ring, plus the slots
  uint64_t metadata_bytes = 0, state_bytes = 0, activation_bytes = 0, process_bytes = 0;
  uint64_t overhead_bytes = 0;
  uint64_t peak_rss_bytes = 0;
  bool exceeds_ram = false;  // the budget in use is more than MachineFigures::ram_bytes
};

// The prediction for one layout (WeightStore::layout at the budget).  Throws k3::Error naming a
// machine figure that is not positive or an efficiency outside (0, 1].
BudgetPlan plan_budget(const WeightStoreStats& layout, const ModelFigures& model, const MachineFigures& machine,
                       const PlanOptions& options = {});

// The figures of a bound checkpoint (Model::load with headers_only is enough).
ModelFigures model_figures(const ModelConfig& config, const ModelWeights& weights, const Checkpoint& ckpt);

// The smallest budget that keeps the trunk resident, and the one that holds every expert too.
uint64_t trunk_resident_budget(const WeightStoreStats& layout);
uint64_t everything_budget(const WeightStoreStats& layout);

}  // namespace k3
