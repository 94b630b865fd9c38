// What each rank of a multi-process run holds, reads and sends (dist/expert_plan.h): its own
// rows of every row-split matrix (dist/row_split.h: the trunk's products, the output head and,
// in the latency layout, the routed experts), the routed experts placed on it whole in the
// throughput layout, and the whole of every other matrix (router, kv_b, norms and the
// embedding, read a row per token).  `k3 inspect --ranks R` prints these figures and a run
// measures them (bytes through MPI, peak resident memory).
#pragma once

#include <cstdint>

#include "dist/expert_plan.h"
#include "model/k3_config.h"
#include "model/weights.h"

namespace k3 {

struct RankFootprint {
  uint64_t resident_bytes = 0;    // weight bytes the rank reads at load and keeps
  uint64_t replicated_bytes = 0;  // of which every rank holds the same (router, kv_b)
  uint64_t read_per_token = 0;    // weight bytes one decoded token reads on this rank: the sum of
  uint64_t trunk_read_per_token = 0;   //   its share of the trunk (every product but the routed experts),
  uint64_t expert_read_per_token = 0;  //   its rows of top_k experts per MoE layer,
  uint64_t embed_read_per_token = 0;   //   and the token's embedding row
  uint64_t sent_per_token = 0;    // bytes it sends per decoded token (its output rows, to each other rank)
  uint64_t received_per_token = 0;
  // Exchanges (one collective each) per decoded token: one per batch of row-split products
  // (KDA: its products of x, the low-rank second halves, o; MLA: its products of x, q_b, o; MoE:
  // latent down, shared gate+up, shared down, the experts' gate+up, their down, latent up; a
  // dense MLP: gate+up, down; the head).
  uint64_t collectives_per_token = 0;
};

// Places the routed experts for `layout` over `ranks` (replicas: extra copies of each expert in
// the throughput layout): sets each MoE layer's placement and whether its experts are row-split.
// Throws k3::Error when replicas does not fit the rank count.
void apply_layout(ModelWeights& w, dist::Layout layout, int ranks, int replicas);

// Rank `rank` of `ranks` for these weights with the routed experts placed as `layout` (and
// replicas) says; a decoded token reads the trunk, the embedding row
// and top_k experts per MoE layer (the experts' average size).
RankFootprint rank_footprint(const ModelWeights& w, const TextConfig& c, int rank, int ranks,
                             dist::Layout layout = dist::Layout::kLatency, int replicas = 0);

// Copies this rank's rows of every row-split matrix, and its whole routed experts in the
// throughput layout, of a mapped checkpoint into one arena of
// huge-page memory (decode streams them much faster than from 4 KiB page-cache pages) and points
// the matrices there (Matrix::own_rows_only); the replicated matrices are read into the page
// cache where they are.  Other ranks' rows are never read.
void read_own_rows(ModelWeights& w, int rank, int ranks);

}  // namespace k3
