#include "perf/model_bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "base/thread_pool.h"
#include "dist/row_split.h"
#include "dist/world.h"
#include "engine/generator.h"
#include "engine/sampler.h"
#include "io/huge_pages.h"
#include "kernels/mla_prefill.h"
#include "model/k3_model.h"
#include "model/weight_store.h"
#include "perf/stopwatch.h"

namespace k3 {

uint64_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5" << std::flush;
  return static_cast<bool>(f);
}

void apply_prefill_roofline(PrefillFigure& f, double peak_gflops) {
  const double flops = f.weight_flops_per_token + f.attention_flops_per_token;
  f.roofline_tokens_per_s = flops > 0 ? peak_gflops * 1e9 / flops : 0.0;
  // No fp32 peak probe on the plain reference path (K3_ISA=ref): no roofline, ratio 0 (not inf).
  f.roofline_ratio = f.roofline_tokens_per_s > 0 ? f.tokens_per_s / f.roofline_tokens_per_s : 0.0;
}

namespace {

// What this rank holds of a matrix: its rows when the matrix is split over several ranks
// (dist/row_split.h), else all of them.
dist::RowRange held_rows(const Matrix& m) {
  if (!m.row_split || dist::size() <= 1) return {0, m.rows};
  return dist::rows_of(m.rows, dist::rank(), dist::size());
}

struct Active {
  double bytes = 0;   // weights this rank reads per decoded token
  double params = 0;  // parameters it uses per token (no embedding, no lm_head)
  std::vector<ByteSpan> spans;  // those bytes (the first experts it holds standing for the routed ones)
  void add(const Matrix& m, bool count_params = true) {
    if (m.empty()) return;
    const dist::RowRange r = held_rows(m);
    if (r.count() == 0) return;
    const uint64_t row = m.data_bytes() / static_cast<uint64_t>(m.rows);
    const uint64_t srow = m.scale_bytes() / static_cast<uint64_t>(m.rows);
    const uint64_t n = static_cast<uint64_t>(r.count()), r0 = static_cast<uint64_t>(r.r0);
    bytes += static_cast<double>(n * (row + srow));
    if (count_params) params += static_cast<double>(r.count() * m.cols);
    spans.push_back({static_cast<const uint8_t*>(m.data) + r0 * row, n * row});
    if (srow > 0) spans.push_back({m.scales + r0 * srow, n * srow});
  }
  void add(const MlpWeights& m) {
    add(m.gate);
    add(m.up);
    add(m.down);
  }
};

Active active_per_token(const Model& model) {
  const TextConfig& c = model.text();
  const ModelWeights& w = model.weights();
  Active a;
  for (const LayerWeights& L : w.layers) {
    if (L.kind == LayerKind::kKda) {
      const KdaWeights& k = L.kda;
      for (const Matrix* m : {&k.q, &k.k, &k.v, &k.f_a, &k.f_b, &k.b, &k.g, &k.g_a, &k.g_b, &k.o}) a.add(*m);
    } else {
      const MlaWeights& m = L.mla;
      for (const Matrix* x : {&m.q_a, &m.q_b, &m.kv_a, &m.kv_b, &m.g, &m.o}) a.add(*x);
    }
    if (!L.moe) {
      a.add(L.dense);
      continue;
    }
    const MoeWeights& m = L.moe_w;
    for (const Matrix* x : {&m.router, &m.latent_down, &m.latent_up}) a.add(*x);
    if (!m.shared.gate.empty()) a.add(m.shared);
    if (m.experts.empty()) continue;
    // top_k experts per token (a checkpoint with fewer experts still counts top_k experts'
    // bytes); in the throughput layout this rank runs top_k / R of them, on experts it holds.
    const dist::ExpertPlacement& place = m.placement;
    const int k = place.parallel() ? std::max(1, c.top_k / place.ranks()) : c.top_k;
    int added = 0;
    for (size_t e = 0; e < m.experts.size() && added < k; ++e) {
      if (place.parallel() && !place.holds(dist::rank(), static_cast<int>(e))) continue;
      a.add(m.experts[e]);
      ++added;
    }
    if (added < k) {
      Active one;
      one.add(m.experts[0]);
      a.bytes += one.bytes * (k - added);
      a.params += one.params * (k - added);
    }
  }
  a.add(w.lm_head, false);
  a.bytes += static_cast<double>(c.hidden_size) * 2.0;  // + one embedding row
  return a;
}

double state_bytes(const SequenceState& s) { return static_cast<double>(s.bytes()); }

// Attention FLOPs of a prompt of n tokens, per token (see PrefillFigure).
double attention_flops_per_token(const TextConfig& c, int64_t n) {
  const MlaPrefillShape mla{c.num_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank};
  double flops = 0;
  for (LayerKind kind : c.layer_kinds)
    flops += kind == LayerKind::kMla ? 2.0 * mla_prefill_attention_macs(mla, 0, n) / static_cast<double>(n)
                                     : 4.0 * c.kda.num_heads * c.kda.head_dim * c.kda.head_dim;
  return flops;
}

// The prompt through the model as `k3 generate` runs it (engine/generator.h); seconds taken.
double prefill_seconds(const Model& model, SequenceState& s, const std::vector<int32_t>& prompt, int chunk) {
  std::vector<float> logits;
  const double t0 = now_seconds();
  prefill(model, s, prompt, chunk, {}, false, &logits);
  return now_seconds() - t0;
}

std::vector<int32_t> prompt_of(int n, int vocab) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = static_cast<int32_t>((i * 7919 + 13) % (vocab - 256));
  return p;
}

}  // namespace

ModelBenchResult run_model_bench(const Model& model, const std::string& label, const MachineLimits& limits,
                                 ThreadPool& pool, const ModelBenchOptions& opt) {
  ModelBenchResult r;
  r.model = label;
  r.threads = pool.size();
  K3_CHECK(!opt.prompt_tokens.empty() && opt.prefill_chunk > 0 && opt.reps >= 1,
           "model bench: needs a prompt length, a chunk and a repetition");
  r.prompt_tokens = opt.prompt_tokens.front();
  const int64_t vocab = model.text().vocab_size;
  const Active active = active_per_token(model);
  r.active_params_per_token = active.params;

  // Prefill: each length into a fresh sequence, in chunks, after one warm-up of a chunk or less
  // (page cache, allocations).  The decode figures continue the first length's prompt.
  SequenceState base = model.new_sequence();
  const double peak_before = measure_fp32_peak_once(pool);
  {
    SequenceState warm = model.new_sequence();
    prefill_seconds(model, warm, prompt_of(std::min(r.prompt_tokens, opt.prefill_chunk), static_cast<int>(vocab)),
                    opt.prefill_chunk);
  }
  uint64_t peak_rss = peak_rss_bytes();  // before the resets below
  r.prefill_rss_per_length = reset_peak_rss();
  for (size_t li = 0; li < opt.prompt_tokens.size(); ++li) {
    const int n = opt.prompt_tokens[li];
    const std::vector<int32_t> prompt = prompt_of(n, static_cast<int>(vocab));
    PrefillFigure f;
    f.prompt_tokens = n;
    f.chunk = std::min(n, opt.prefill_chunk);
    f.weight_flops_per_token = 2.0 * active.params;
    f.attention_flops_per_token = attention_flops_per_token(model.text(), n);
    std::vector<double> rates;
    for (int rep = 0; rep < opt.reps; ++rep) {
      if (r.prefill_rss_per_length) reset_peak_rss();
      SequenceState s = model.new_sequence();
      if (rep == 0) {
        profile_reset();
        profile_enable(true);
      }
      const double dt = prefill_seconds(model, s, prompt, opt.prefill_chunk);
      if (rep == 0) {
        profile_enable(false);
        f.profile = profile_snapshot();
      }
      rates.push_back(n / dt);
      f.peak_rss_bytes = std::max(f.peak_rss_bytes, peak_rss_bytes());
      peak_rss = std::max(peak_rss, f.peak_rss_bytes);
      f.state_bytes = s.bytes();
      log_info("bench: prefill of ", n, " tokens, rep ", rep, ": ", n / dt, " tokens/s");
      if (li == 0 && rep + 1 == opt.reps) base = std::move(s);
    }
    const Summary ps = summarize(rates);
    f.tokens_per_s = ps.median;
    f.min = ps.min;
    f.max = ps.max;
    r.prefills.push_back(std::move(f));
  }
  // The limit: the higher of the machine figure and probes around the prefill runs, so a slow
  // spell of the VM cannot inflate the ratio.
  r.prefill_peak_gflops = std::max({limits.fp32_gflops, peak_before, measure_fp32_peak_once(pool)});
  for (PrefillFigure& f : r.prefills) apply_prefill_roofline(f, r.prefill_peak_gflops);

  // Decode: greedy steps continuing the prompt, each repetition from the same state.
  std::vector<double> decode;
  WeightStore* store = model.weight_store();
  constexpr uint64_t kProbeBytes = uint64_t{4} << 30;
  if (store != nullptr) r.stream_probe_gbps = store->probe_trunk_read_gbps(kProbeBytes);
  WeightStoreStats store_before;
  double decode_seconds = 0;
  const double bw_before = measure_read_gbps_once(pool);
  double bw_probes = 0.0, weights_probe = 0.0;
  dist::Traffic traffic_before;
  for (int rep = 0; rep <= opt.reps; ++rep) {
    SequenceState s = base;
    int32_t tok = 1;
    if (rep == 1) {
      profile_reset();
      profile_enable(true);
      if (store != nullptr) store_before = store->stats();
      traffic_before = dist::traffic();
    }
    const double t0 = now_seconds();
    for (int i = 0; i < opt.decode_tokens; ++i) {
      std::vector<float> logits;
      SequenceInput in{&s, std::span<const int32_t>(&tok, 1), false};
      model.forward(std::span<const SequenceInput>(&in, 1), &logits);
      tok = argmax(logits.data(), vocab);
    }
    const double dt = now_seconds() - t0;
    if (rep == 1) {
      profile_enable(false);
      r.decode_profile = profile_snapshot();
    }
    if (rep > 0) decode.push_back(opt.decode_tokens / dt);
    if (rep > 0) decode_seconds += dt;
    log_info("bench: decode rep ", rep, ": ", opt.decode_tokens / dt, " tokens/s");
    if (store != nullptr) continue;  // the probes below would read the mapped files from disk
    // A probe after every repetition (~30 ms each): a VM's read bandwidth can change state within
    // seconds, and probes only before and after can miss a fast spell the decode ran in (a
    // "roofline" ratio above 100%).
    bw_probes = std::max(bw_probes, measure_read_gbps_once(pool));
    // And the same streaming read over exactly the bytes a decoded token reads: on a VM the
    // probe buffer can sit in slower memory than the weights, and the roofline is reading those
    // bytes.
    if (rep % 2 == 0) weights_probe = std::max(weights_probe, measure_read_gbps_spans(pool, active.spans));
  }
  if (store != nullptr) {
    const WeightStoreStats after = store->stats();
    const double tokens = static_cast<double>(opt.decode_tokens) * opt.reps;
    const double read = static_cast<double>(after.bytes_read - store_before.bytes_read);
    const double hits = static_cast<double>(after.expert_hits - store_before.expert_hits);
    const double misses = static_cast<double>(after.expert_misses - store_before.expert_misses);
    r.streamed = true;
    r.stream_budget_bytes = static_cast<double>(after.budget);
    r.stream_bytes_per_token = tokens > 0 ? read / tokens : 0;
    r.stream_gbps = decode_seconds > 0 ? read / decode_seconds / 1e9 : 0;
    r.stream_hit_rate = hits + misses > 0 ? hits / (hits + misses) : 0;
    const double guesses = static_cast<double>(after.expert_predicted - store_before.expert_predicted);
    r.stream_guesses_per_token = tokens > 0 ? guesses / tokens : 0;
    r.stream_guess_accuracy =
        guesses > 0 ? static_cast<double>(after.expert_predicted_used - store_before.expert_predicted_used) / guesses : 0;
    r.stream_wait_fraction =
        decode_seconds > 0 ? (after.io_wait_seconds - store_before.io_wait_seconds) / decode_seconds : 0;
    r.stream_probe_gbps = std::max(r.stream_probe_gbps, store->probe_trunk_read_gbps(kProbeBytes));
  }
  if (opt.reps > 0) {
    const dist::Traffic t = dist::traffic();
    const double tokens = static_cast<double>(opt.decode_tokens) * opt.reps;
    r.ranks = dist::size();
    r.sent_per_token = static_cast<double>(t.bytes_sent - traffic_before.bytes_sent) / tokens;
    r.exchanges_per_token = static_cast<double>(t.collectives - traffic_before.collectives) / tokens;
  }
  r.weights_read_gbps = weights_probe;
  r.weights_residency = residency_name(model.weights_residency());
  // Over several ranks each copies its own rows (and experts) out of the mapping into memory.
  if (!model.weights().arenas.empty()) r.weights_residency = "memory (this rank's share)";
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  for (const ByteSpan& s : active.spans) {
    const auto p = reinterpret_cast<uintptr_t>(s.data);
    ranges.emplace_back(p, p + s.bytes);
  }
  const HugePageCoverage coverage = huge_page_coverage(ranges);
  r.weights_huge_page_fraction = coverage.known() ? coverage.fraction() : -1.0;
  // As for the kernels: the fastest probe the machine showed, so a low probe cannot inflate the
  // ratio.
  r.read_gbps_during = std::max({limits.read_gbps, limits.read_gbps_max, bw_before, bw_probes, weights_probe});
  const Summary ds = summarize(decode);
  r.decode_tokens_per_s = ds.median;
  r.decode_min = ds.min;
  r.decode_max = ds.max;
  r.decode_bytes_per_token = active.bytes + state_bytes(base);

  // Batched decode: opt.batch copies of the prompt's state, one token each per forward call.
  r.batch = opt.batch;
  if (opt.batch > 1) {
    std::vector<double> batched;
    for (int rep = 0; rep <= opt.reps; ++rep) {
      std::vector<SequenceState> seqs(static_cast<size_t>(opt.batch), base);
      std::vector<int32_t> toks(static_cast<size_t>(opt.batch));
      for (int b = 0; b < opt.batch; ++b) toks[static_cast<size_t>(b)] = 1 + b;  // distinct continuations
      const double t0 = now_seconds();
      for (int i = 0; i < opt.decode_tokens; ++i) {
        std::vector<SequenceInput> in;
        for (int b = 0; b < opt.batch; ++b)
          in.push_back({&seqs[static_cast<size_t>(b)], std::span<const int32_t>(&toks[static_cast<size_t>(b)], 1), false});
        std::vector<float> logits;
        model.forward(in, &logits);
        for (int b = 0; b < opt.batch; ++b)
          toks[static_cast<size_t>(b)] = argmax(logits.data() + static_cast<size_t>(b) * static_cast<size_t>(vocab), vocab);
      }
      const double dt = now_seconds() - t0;
      if (rep > 0) batched.push_back(static_cast<double>(opt.batch) * opt.decode_tokens / dt);
      log_info("bench: batched decode rep ", rep, ": ", static_cast<double>(opt.batch) * opt.decode_tokens / dt, " tokens/s");
    }
    const Summary bs = summarize(batched);
    r.batch_decode_tokens_per_s = bs.median;
    r.batch_decode_min = bs.min;
    r.batch_decode_max = bs.max;
  }
  r.decode_roofline_tokens_per_s = r.read_gbps_during * 1e9 / r.decode_bytes_per_token;
  r.decode_roofline_ratio = r.decode_roofline_tokens_per_s > 0 ? r.decode_tokens_per_s / r.decode_roofline_tokens_per_s : 0.0;
  r.peak_rss_bytes = std::max(peak_rss, peak_rss_bytes());
  return r;
}

}  // namespace k3
