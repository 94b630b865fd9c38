// Whole-model decode and prefill speed on a checkpoint (by default a synthetic one with full
// Kimi K3 widths), with rooflines from the measured machine limits, a per-phase profile and
// peak memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/profile.h"
#include "engine/generator.h"
#include "perf/machine.h"

namespace k3 {

class Model;

struct ModelBenchOptions {
  std::vector<int> prompt_tokens{128};  // prefill lengths, one figure each; decode continues the first
  int prefill_chunk = static_cast<int>(kPrefillChunk);  // prompt tokens per forward call, as `k3 generate`
  int decode_tokens = 8;    // decode steps per repetition
  int batch = 4;            // sequences stepped together for the batched-decode figure (1: none)
  int reps = 5;
};

// One prompt length: the prompt prefilled in chunks into a fresh sequence.
struct PrefillFigure {
  int prompt_tokens = 0;
  int chunk = 0;
  double tokens_per_s = 0, min = 0, max = 0;
  // Arithmetic per prompt token, averaged over the prompt: 2 x the active parameters, plus the
  // attention (MLA's causal scores and values in the decompressed form, 2 x 320 FLOP per query,
  // key and head at K3's widths, and KDA's state updates, 4 x K x V per token and head).  The
  // roofline is the fp32 FMA peak over that; what the chunks redo (MLA decompressing the cache
  // once per chunk) is work the ratio charges to k3.
  double weight_flops_per_token = 0, attention_flops_per_token = 0;
  double roofline_tokens_per_s = 0, roofline_ratio = 0;
  PhaseTimes profile;
  uint64_t peak_rss_bytes = 0;  // peak resident memory during this prefill (see prefill_rss_per_length)
  uint64_t state_bytes = 0;     // the sequence's KDA states and latent cache after it
};

struct ModelBenchResult {
  std::string model;
  int threads = 0;
  int prompt_tokens = 0;  // the prompt decode continues (the first length)
  double decode_tokens_per_s = 0, decode_min = 0, decode_max = 0;
  double decode_bytes_per_token = 0;      // weights + state read per decoded token
  double decode_roofline_tokens_per_s = 0;  // read_gbps / bytes per token
  double decode_roofline_ratio = 0;
  // Batched decode: `batch` sequences advanced one token each per forward call (as the server's
  // continuous batching does), tokens/s summed over the sequences.
  int batch = 0;
  double batch_decode_tokens_per_s = 0, batch_decode_min = 0, batch_decode_max = 0;
  std::vector<PrefillFigure> prefills;  // one per prompt length, in the order asked
  // Whether each figure's peak_rss_bytes is its own (the kernel let the high-water mark be
  // reset), or the process's peak so far.
  bool prefill_rss_per_length = false;
  double active_params_per_token = 0;  // excluding the embedding table and lm_head
  double prefill_peak_gflops = 0;      // fp32 peak used: max of machine figure and probes around
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
  PhaseTimes decode_profile;
  uint64_t peak_rss_bytes = 0;
  // Over several ranks (mpirun): the figures above are rank 0's (its share of the weights, its
  // memory); every rank runs every step, so they decode at the same rate.  Per decoded token,
  // the bytes it sent to the others and the exchanges it took part in.
  int ranks = 1;
  double sent_per_token = 0, exchanges_per_token = 0;
};

ModelBenchResult run_model_bench(const Model& model, const std::string& label, const MachineLimits& limits,
                                 ThreadPool& pool, const ModelBenchOptions& options);

// The process's peak resident memory (VmHWM), and a reset of it (Linux: clear_refs "5");
// false when the kernel does not allow the reset.
uint64_t peak_rss_bytes();
bool reset_peak_rss();

// The prefill roofline of a figure from its FLOP counts and the fp32 peak.
void apply_prefill_roofline(PrefillFigure& f, double peak_gflops);

}  // namespace k3
