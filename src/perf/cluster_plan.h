// k3 plan --ranks R: batch-1 decode and prefill of one model over R ranks in the latency layout
// (model/partition.h: every product split by output rows, the outputs all-gathered), predicted
// from per-rank bytes, FLOPs and exchanges per token on a described cluster.  A pure function
// of its inputs, unit-tested without measuring anything.
//
// Decode, one token, on the rank that reads the most:
//   weights  = trunk share / (mem x bf16 eff) + expert share / (mem x mxfp4 eff)
//              (its rows of every trunk product and of top_k experts per MoE layer)
//   state    = 2 x one sequence's KDA state / mem: read and written each token on every rank
//              (attention is not split; every rank runs every head)
//   exchange = X x ceil(log2 R) x step  +  inter-node bytes / network
//              X exchanges per token (one per batch of row-split products), each an all-gather
//              of ceil(log2 R) rounds (recursive doubling) of `step` latency: the network's when
//              the ranks span nodes, shared memory's within one; inter-node bytes: what one
//              node's ranks receive from the ranks of other nodes, through that node's link
//   time = weights + state + exchange  (the exchanges wait for the products; nothing overlaps)
//
// Prefill of P tokens in chunks of C: per chunk of c tokens, the longer of its weight reads
// (trunk share once, plus its rows of the D = E (1 - (1 - k/E)^c) distinct experts touched per
// MoE layer) at memory speed and its arithmetic (2 x active params x c / R) at prefill_eff of
// the fp32 peak, plus X exchanges of c tokens' rows; tokens/s = P / (sum over the chunks).
#pragma once

#include <cstdint>

#include "model/partition.h"
#include "perf/plan.h"

namespace k3 {

struct ClusterFigures {
  int ranks = 1;
  int ranks_per_node = 1;          // ranks on one node exchange through its memory
  double net_gbps = 0;             // each node's link, GB/s per direction
  double net_latency_us = 0;       // one message between nodes
  double shm_latency_us = 0.5;     // one message between ranks of a node
};

struct ClusterPlan {
  int ranks = 1, nodes = 1;
  // Decode, seconds per token.
  double weights_s = 0, state_s = 0, exchange_latency_s = 0, exchange_bytes_s = 0;
  double decode_seconds = 0, decode_tokens_per_second = 0;
  // Prefill.
  double prefill_seconds = 0, prefill_tokens_per_second = 0;
  // Per decoded token, on the busiest rank.
  uint64_t read_bytes = 0, sent_bytes = 0, received_bytes = 0, node_inbound_bytes = 0, exchanges = 0;
};

// `busiest`: the footprint of the rank that reads the most (rank_footprint over every rank).
// Throws k3::Error for figures that are not positive (machine or cluster).
ClusterPlan plan_cluster(const RankFootprint& busiest, const ModelFigures& model, const MachineFigures& per_rank,
                         const ClusterFigures& cluster, const PlanOptions& options = {});

}  // namespace k3
