// Whole-model decode and prefill speed on a checkpoint (by default a synthetic one with full
// Kimi K3 widths), with rooflines from the measured machine limits, a per-phase profile and
// peak memory.
#pragma once

#include <cstdint>
#include <string>

#include "base/profile.h"
#include "perf/machine.h"

namespace k3 {

class Model;

struct ModelBenchOptions {
  int prompt_tokens = 128;  // prefill length
  int decode_tokens = 8;    // decode steps per repetition
  int batch = 4;            // sequences stepped together for the batched-decode figure (1: none)
  int reps = 5;
};

struct ModelBenchResult {
  std::string model;
  int threads = 0;
  int prompt_tokens = 0;
  double decode_tokens_per_s = 0, decode_min = 0, decode_max = 0;
  double decode_bytes_per_token = 0;      // weights + state read per decoded token
  double decode_roofline_tokens_per_s = 0;  // read_gbps / bytes per token
  double decode_roofline_ratio = 0;
  // Batched decode: `batch` sequences advanced one token each per forward call (as the server's
  // continuous batching does), tokens/s summed over the sequences.
  int batch = 0;
  double batch_decode_tokens_per_s = 0, batch_decode_min = 0, batch_decode_max = 0;
  double prefill_tokens_per_s = 0, prefill_min = 0, prefill_max = 0;
  double active_params_per_token = 0;  // excluding the embedding table and lm_head
  double prefill_peak_gflops = 0;             // fp32 peak used: max of machine figure and probes around
  double prefill_roofline_tokens_per_s = 0;  // that peak / (2 x active params)
  double prefill_roofline_ratio = 0;
  double read_gbps_during = 0;  // bandwidth probed around the decode runs
  // Streamed weights (model/weight_store.h): what decode read from the checkpoint's files per
  // token and how fast, against direct reads of the trunk's bytes (what a streamed decode reads)
  // probed before and after the decode runs with the store's own reader (the faster of the two).
  bool streamed = false;
  double stream_budget_bytes = 0;
  double stream_bytes_per_token = 0;
  double stream_gbps = 0;          // bytes read during decode / decode time
  double stream_probe_gbps = 0;
  double stream_hit_rate = 0;      // expert requests found in the cache during decode
  double stream_wait_fraction = 0; // decode time spent waiting for reads
  double stream_guesses_per_token = 0;  // expert reads started on a next-layer guess
  double stream_guess_accuracy = 0;     // of those, the share the layer then chose
  double weights_read_gbps = 0;  // fastest streaming read of the bytes one decoded token reads
  std::string weights_residency;  // "memory" or "mmap" (--weights, as resolved)
  // Of the bytes one decoded token reads, the share the kernel backs with 2 MiB pages (after
  // the runs; io/huge_pages.h): on 4 KiB pages the same stream reads much slower.  -1 when
  // /proc/self/smaps cannot be read.
  double weights_huge_page_fraction = 0;
  PhaseTimes decode_profile, prefill_profile;
  uint64_t peak_rss_bytes = 0;
  // Over several ranks (mpirun): the figures above are rank 0's (its share of the weights, its
  // memory); every rank runs every step, so they decode at the same rate.  Per decoded token,
  // the bytes it sent to the others and the exchanges it took part in.
  int ranks = 1;
  double sent_per_token = 0, exchanges_per_token = 0;
};

ModelBenchResult run_model_bench(const Model& model, const std::string& label, const MachineLimits& limits,
                                 ThreadPool& pool, const ModelBenchOptions& options);

uint64_t peak_rss_bytes();

}  // namespace k3
