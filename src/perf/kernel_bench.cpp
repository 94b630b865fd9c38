#include "perf/kernel_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>

#include "base/aligned.h"
#include "base/log.h"
#include "base/progress.h"
#include "base/thread_pool.h"
#include "kernels/kda.h"
#include "kernels/linear.h"
#include "kernels/mla_attention.h"
#include "kernels/mla_prefill.h"
#include "kernels/mxfp4.h"
#include "perf/stopwatch.h"

namespace k3 {
namespace {

// Fast parallel fill with small pseudo-random values (content only needs to be finite).
// Fills v in parallel with gen(random 64-bit value); content only needs to be finite.
template <typename Vec, typename Gen>
void fill_parallel(ThreadPool& pool, Vec& v, uint64_t seed, Gen gen) {
  pool.parallel_for(static_cast<int64_t>(v.size()), 4096, [&](int64_t b, int64_t e, int) {
    uint64_t s = (seed ^ (static_cast<uint64_t>(b) * 0x9e3779b97f4a7c15ULL)) | 1;
    for (int64_t i = b; i < e; ++i) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      v[i] = gen(s);
    }
  });
}
void fill_bf16(ThreadPool& pool, std::vector<uint16_t>& v, uint64_t seed) {
  // sign | exponent 118..125 | mantissa: magnitudes ~ 2^-9 .. 2^-2
  fill_parallel(pool, v, seed, [](uint64_t s) {
    return static_cast<uint16_t>(((s & 1) << 15) | ((118 + (s >> 1) % 8) << 7) | ((s >> 8) & 0x7f));
  });
}
void fill_u8(ThreadPool& pool, std::vector<uint8_t>& v, uint64_t seed, uint8_t lo, uint8_t span) {
  fill_parallel(pool, v, seed, [=](uint64_t s) { return static_cast<uint8_t>(span == 0 ? s : lo + s % span); });
}
template <class Vec>
void fill_f32(Vec& v, uint64_t seed, float scale) {
  fill_parallel(global_pool(), v, seed,
                [=](uint64_t s) { return scale * (static_cast<float>(s % 2001) / 1000.0f - 1.0f); });
}

struct Timed {
  Summary seconds;
  double bw_before = 0, bw_after = 0;
  double bw_own = 0;  // fastest streaming read of the kernel's own buffers (0: not probed)
};

// Times `reps` passes of `calls` body calls each (after one warm-up pass), as seconds per call:
// a figure that rotates over many matrices or states times whole passes, so its median, min and
// max are those of passes over every copy (per-call samples of ~0.1 ms would make min and max the
// outliers of single calls, e.g. one preempted call).  Probes bandwidth before and after: the
// probe buffer (with `probe`) and, when `own` names them, the very bytes the kernel reads.  A VM
// may place buffers in memory of different speed, so a kernel can read its own matrices faster
// than any probe buffer (a "ratio" above 100%); a read of the same bytes bounds what the kernel
// can do.
Timed time_it(ThreadPool& pool, int reps, bool probe, const std::function<void()>& body,
              const std::vector<ByteSpan>& own = {}, int calls = 1) {
  Timed t;
  const bool probe_own = !own.empty();  // also in --quick runs: the own buffers are small there
  if (probe) t.bw_before = measure_read_gbps_once(pool);
  for (int c = 0; c < calls; ++c) body();
  if (probe_own) t.bw_own = measure_read_gbps_spans(pool, own);  // after the warm-up: pages resident
  std::vector<double> v;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now_seconds();
    for (int c = 0; c < calls; ++c) body();
    v.push_back((now_seconds() - t0) / calls);
  }
  if (probe_own) t.bw_own = std::max(t.bw_own, measure_read_gbps_spans(pool, own));
  if (probe) t.bw_after = measure_read_gbps_once(pool);
  t.seconds = summarize(v);
  return t;
}

BenchResult bandwidth_result(const std::string& name, double bytes, const Timed& t, const MachineLimits& m) {
  BenchResult r;
  r.name = name;
  r.unit = "GB/s";
  r.value = bytes / t.seconds.median / 1e9;
  r.min = bytes / t.seconds.max / 1e9;
  r.max = bytes / t.seconds.min / 1e9;
  // The VM's bandwidth drifts between states; the limit is the best the machine showed (the
  // fastest of its probes, and the probes around this run), so a probe that happens to read low
  // never inflates the ratio.
  const double limit = std::max({m.read_gbps, m.read_gbps_max, t.bw_before, t.bw_after, t.bw_own});
  r.ratio_to_limit = r.value / limit;
  r.limit = "read bandwidth " + std::to_string(static_cast<int>(limit + 0.5)) +
            " GB/s (the fastest machine probe, or a probe around the run)";
  if (t.bw_own > 0) {
    r.own_read_gbps = t.bw_own;
    char detail[64];
    std::snprintf(detail, sizeof detail, "its own buffers read at %.1f GB/s", t.bw_own);
    r.limit_detail = detail;
  }
  r.limit_kind = BenchResult::Limit::kRead;
  r.limit_value = limit;
  return r;
}

BenchResult flops_result(const std::string& name, double flops, const Timed& t, double peak, const std::string& what) {
  BenchResult r;
  r.name = name;
  r.unit = "GFLOP/s";
  r.value = flops / t.seconds.median / 1e9;
  r.min = flops / t.seconds.max / 1e9;
  r.max = flops / t.seconds.min / 1e9;
  r.ratio_to_limit = peak > 0 ? r.value / peak : 0;
  r.limit = what;
  return r;
}

// A product's FLOP rate against the fp32 FMA peak: the higher of the machine figure and probes
// taken right before and after body's runs (a slow spell of the VM cannot inflate the ratio).
BenchResult fp32_flops_figure(ThreadPool& pool, const MachineLimits& m, const std::string& name, double flops, int reps,
                              const std::function<void()>& body, int calls = 1) {
  const double before = measure_fp32_peak_once(pool);
  const Timed t = time_it(pool, reps, false, body, {}, calls);
  const double peak = std::max({m.fp32_gflops, before, measure_fp32_peak_once(pool)});
  BenchResult r = flops_result(name, flops, t, peak,
                               "fp32 FMA peak " + std::to_string(static_cast<int>(peak + 0.5)) +
                                   " GFLOP/s (max of machine figure and probes around the run)");
  r.limit_kind = BenchResult::Limit::kFp32;
  r.limit_value = peak;
  return r;
}

// Turns r, the same product measured under an opt-in bf16 precision, into its own figure: the
// ratio is to that unit's peak (not re-based on the fp32 one), the note compares with exact.
void as_bf16_figure(BenchResult& r, const std::string& name, double peak, const std::string& limit,
                    const BenchResult& exact, const std::string& what) {
  r.name = name;
  r.ratio_to_limit = r.value / peak;
  r.limit = limit;
  r.limit_kind = BenchResult::Limit::kOther;
  r.note = std::to_string(r.value / exact.value).substr(0, 4) + "x the exact fp32 " + what;
}

// The limit text of a bf16 figure: the higher of the machine's bf16 peak and probes around the
// run, as for the fp32 figures.
std::string bf16_limit(double peak, const char* precision) {
  return "bf16 dot-product peak " + std::to_string(static_cast<int>(peak + 0.5)) +
         " GFLOP/s (max of machine figure and probes around the run; " + precision + ")";
}

// How many copies of a `bytes`-sized operand a figure rotates through: enough for `factor` times
// the last-level cache (at least `least`), so the figure streams from memory.  --quick (a smoke
// run, not a measurement) keeps `least`: VMs can report a last-level cache of hundreds of MB.
int rotation(const MachineLimits& m, uint64_t bytes, uint64_t factor, int least, bool quick) {
  if (quick) return least;
  return static_cast<int>(std::max<uint64_t>(least, factor * m.llc_bytes / bytes + 1));
}

// bf16 GEMV y = W x over enough copies of W to exceed the LLC.
BenchResult bench_bf16_gemv(ThreadPool& pool, const MachineLimits& m, int64_t rows, int64_t cols, int reps, bool quick) {
  const uint64_t bytes = static_cast<uint64_t>(rows) * cols * 2;
  const int copies = rotation(m, bytes, 3, 2, quick);
  std::vector<std::vector<uint16_t>> w(copies, std::vector<uint16_t>(rows * cols));
  for (int i = 0; i < copies; ++i) fill_bf16(pool, w[i], 11 + i);
  std::vector<float> x(cols), y(rows);
  fill_f32(x, 5, 1.0f);
  int next = 0;
  std::vector<ByteSpan> own;
  for (const std::vector<uint16_t>& wi : w) own.push_back({wi.data(), bytes});
  const Timed t = time_it(
      pool, reps, !quick,
      [&] {
        Matrix mat{WeightFormat::kBF16, rows, cols, w[next].data(), nullptr};
        next = (next + 1) % copies;
        linear(mat, x.data(), 1, y.data());
      },
      own, copies);
  BenchResult r = bandwidth_result("bf16_gemv_" + std::to_string(rows) + "x" + std::to_string(cols), static_cast<double>(bytes), t, m);
  r.note = std::to_string(copies) + " matrices rotated (" + std::to_string(copies * bytes >> 20) + " MiB)";
  return r;
}

// `count` MXFP4 matrices of rows x cols with random nibbles and scales 2^-9 .. 2^-4.
struct Mxfp4Experts {
  std::vector<std::vector<uint8_t>> packed, scales;
  std::vector<char> zero_free;  // the scan a checkpoint load does, so the figures time the model's path
  int64_t rows, cols;
  Mxfp4Experts(ThreadPool& pool, int64_t r, int64_t c, int count, uint64_t seed)
      : packed(count), scales(count), zero_free(count), rows(r), cols(c) {
    for (int e = 0; e < count; ++e) {
      packed[e].resize(rows * cols / 2);
      scales[e].resize(rows * cols / 32);
      fill_u8(pool, packed[e], seed + e, 0, 0);
      fill_u8(pool, scales[e], seed + 100 + e, 118, 6);
      zero_free[e] = !scan_mxfp4_scales(scales[e].data(), scales[e].size()).has_zero;
    }
  }
  Matrix matrix(int e) const {
    Matrix m{WeightFormat::kMxfp4, rows, cols, packed[e].data(), scales[e].data()};
    m.scales_zero_free = zero_free[e] != 0;
    return m;
  }
};

// One MXFP4 expert matrix (w1/w3 3072x3584 or w2 3584x3072) rotated over many experts.
BenchResult bench_mxfp4_gemv(ThreadPool& pool, const MachineLimits& m, int64_t rows, int64_t cols, const std::string& which,
                             int reps, bool quick) {
  const uint64_t bytes = static_cast<uint64_t>(rows) * cols / 2 + static_cast<uint64_t>(rows) * cols / 32;
  const int experts = rotation(m, bytes, 3, 4, quick);
  const Mxfp4Experts ex(pool, rows, cols, experts, 100);
  std::vector<float> x(cols), y(rows);
  fill_f32(x, 6, 1.0f);
  int next = 0;
  std::vector<ByteSpan> own;
  for (int e = 0; e < experts; ++e) {
    own.push_back({ex.packed[e].data(), ex.packed[e].size()});
    own.push_back({ex.scales[e].data(), ex.scales[e].size()});
  }
  const Timed t = time_it(
      pool, reps, !quick,
      [&] {
        linear(ex.matrix(next), x.data(), 1, y.data());
        next = (next + 1) % experts;
      },
      own, experts);
  BenchResult r = bandwidth_result("mxfp4_gemv_" + which + "_" + std::to_string(rows) + "x" + std::to_string(cols),
                                   static_cast<double>(bytes), t, m);
  r.note = std::to_string(experts) + " experts rotated";
  return r;
}

// Prefill expert product: one MXFP4 expert matrix times the n tokens routed to it (K3's 16 of
// 896 experts over a 2k-token prompt give ~36 per expert), the experts of ex rotated beyond the
// LLC as in a prefill step, under the current precision.
BenchResult bench_mxfp4_gemm(ThreadPool& pool, const MachineLimits& m, const Mxfp4Experts& ex, int64_t n,
                             const std::string& which, int reps, Precision precision = Precision::kF32) {
  std::vector<float> x(n * ex.cols), y(n * ex.rows);
  fill_f32(x, 7, 1.0f);
  const int experts = static_cast<int>(ex.packed.size());
  int next = 0;
  BenchResult r = fp32_flops_figure(
      pool, m, "mxfp4_gemm_" + which + "_" + std::to_string(ex.rows) + "x" + std::to_string(ex.cols) + "_n" + std::to_string(n),
      2.0 * ex.rows * ex.cols * n, reps,
      [&] {
        linear(ex.matrix(next), x.data(), n, y.data(), precision);
        next = (next + 1) % experts;
      },
      experts);
  r.note = std::to_string(experts) + " experts rotated; prefill's expert products";
  return r;
}

// Prefill GEMM: bf16 weights, fp32 activations, n tokens.
BenchResult bench_gemm(ThreadPool& pool, const MachineLimits& m, int64_t rows, int64_t cols, int64_t n, int reps,
                       Precision precision = Precision::kF32) {
  std::vector<uint16_t> w(rows * cols);
  fill_bf16(pool, w, 77);
  std::vector<float> x(n * cols), y(n * rows);
  fill_f32(x, 8, 1.0f);
  Matrix mat{WeightFormat::kBF16, rows, cols, w.data(), nullptr};
  return fp32_flops_figure(pool, m, "gemm_bf16_" + std::to_string(rows) + "x" + std::to_string(cols) + "_n" + std::to_string(n),
                           2.0 * rows * cols * n, reps, [&] { linear(mat, x.data(), n, y.data(), precision); });
}

struct KdaData {
  int H, D;
  int64_t T;
  std::vector<float> q, k, v, g, beta, o, state;
};

KdaData make_kda(int H, int D, int64_t T) {
  KdaData d{H, D, T, {}, {}, {}, {}, {}, {}, {}};
  const int64_t P = static_cast<int64_t>(H) * D;
  d.q.resize(T * P);
  d.k.resize(T * P);
  d.v.resize(T * P);
  d.g.resize(T * P);
  d.beta.resize(T * H);
  d.o.resize(T * P);
  d.state.assign(static_cast<size_t>(H) * D * D, 0.0f);
  fill_f32(d.q, 1, 0.088f);
  fill_f32(d.k, 2, 0.088f);
  fill_f32(d.v, 3, 1.0f);
  fill_f32(d.g, 4, 0.05f);
  for (float& x : d.g) x = -std::fabs(x);
  fill_f32(d.beta, 5, 0.5f);
  for (float& b : d.beta) b = 0.5f + b;
  return d;
}

// Head-major q, k, v, g and o ([H][T][D]), as the KDA layer hands them to the kernels.
void run_kda(ThreadPool& pool, KdaData& d, bool chunked) {
  pool.run(d.H, [&](int64_t h, int) {
    const int64_t off = h * d.T * d.D;
    KdaHeadIO io;
    io.q = d.q.data() + off;
    io.k = d.k.data() + off;
    io.v = d.v.data() + off;
    io.g = d.g.data() + off;
    io.o = d.o.data() + off;
    io.beta = d.beta.data() + h;
    io.stride_qk = io.stride_v = io.stride_g = io.stride_o = d.D;
    io.stride_beta = d.H;
    float* S = d.state.data() + h * d.D * d.D;
    if (chunked) kda_chunked(io, d.T, d.D, d.D, kKdaChunk, S);
    else kda_recurrent(io, d.T, d.D, d.D, S);
  });
}

}  // namespace

const std::vector<std::string>& kernel_bench_groups() {
  static const std::vector<std::string> groups = {"bf16_gemv", "mxfp4_gemv", "mxfp4_gemm", "gemm", "kda", "mla"};
  return groups;
}

bool kernel_bench_selects(const std::string& filter, const std::string& group) {
  return filter.empty() || group.find(filter) != std::string::npos || filter.rfind(group, 0) == 0;
}

std::vector<BenchResult> run_kernel_benches(ThreadPool& pool, const MachineLimits& m, const KernelBenchOptions& opt) {
  std::vector<BenchResult> out;
  const bool q = opt.quick;
  const int reps = std::max(1, opt.reps);
  auto want = [&](const std::string& group) { return kernel_bench_selects(opt.filter, group); };
  std::vector<std::pair<std::string, std::function<void()>>> jobs;
  if (want("bf16_gemv")) {
    jobs.push_back({"bf16_gemv 12288x7168", [&] { out.push_back(bench_bf16_gemv(pool, m, q ? 1536 : 12288, q ? 896 : 7168, reps, q)); }});
    jobs.push_back({"bf16_gemv 7168x12288", [&] { out.push_back(bench_bf16_gemv(pool, m, q ? 896 : 7168, q ? 1536 : 12288, reps, q)); }});
  }
  if (want("mxfp4_gemv")) {
    jobs.push_back({"mxfp4_gemv w1", [&] { out.push_back(bench_mxfp4_gemv(pool, m, q ? 384 : 3072, q ? 448 : 3584, "w1", reps, q)); }});
    jobs.push_back({"mxfp4_gemv w2", [&] { out.push_back(bench_mxfp4_gemv(pool, m, q ? 448 : 3584, q ? 384 : 3072, "w2", reps, q)); }});
  }
  if (want("mxfp4_gemm"))
    jobs.push_back({"mxfp4_gemm w1", [&] {
                      const int64_t rows = q ? 384 : 3072, cols = q ? 448 : 3584, n = q ? 16 : 36;
                      const uint64_t bytes = static_cast<uint64_t>(rows) * cols / 2 + static_cast<uint64_t>(rows) * cols / 32;
                      const Mxfp4Experts ex(pool, rows, cols, rotation(m, bytes, 2, 2, q), 300);
                      const BenchResult exact = bench_mxfp4_gemm(pool, m, ex, n, "w1", reps);
                      out.push_back(exact);
                      {  // w2 (the down projection): 3072 columns, a multiple of 4 KB per token row
                        const Mxfp4Experts ex2(pool, cols, rows, rotation(m, bytes, 2, 2, q), 301);
                        out.push_back(bench_mxfp4_gemm(pool, m, ex2, n, "w2", reps));
                      }
                      if (m.bf16_gflops > 0 && bf16_dot_available()) {  // --precision bf16-all
                        const double before = measure_bf16_peak_once(pool);
                        BenchResult r = bench_mxfp4_gemm(pool, m, ex, n, "w1", reps, Precision::kBf16All);
                        const double peak = std::max({m.bf16_gflops, before, measure_bf16_peak_once(pool)});
                        as_bf16_figure(r, "mxfp4_gemm_bf16act_w1_" + std::to_string(rows) + "x" + std::to_string(cols) + "_n" +
                                              std::to_string(n),
                                       peak, bf16_limit(peak, "--precision bf16-all"), exact, "expert GEMM");
                        out.push_back(r);
                      }
                    }});
  if (want("gemm")) {
    jobs.push_back({"gemm", [&] {
                      const int64_t rows = q ? 512 : 7168, cols = q ? 768 : 12288, n = q ? 32 : 256;
                      BenchResult exact = bench_gemm(pool, m, rows, cols, n, reps);
                      if (m.amx_bf16_gflops > 0)  // 3 bf16 tile products per exact fp32 product
                        exact.note = "AMX tiles, 3 bf16 pieces per activation: " +
                                     std::to_string(static_cast<int>(300.0 * exact.value / m.amx_bf16_gflops + 0.5)) +
                                     "% of the AMX peak / 3";
                      out.push_back(exact);
                      // The opt-in --precision bf16 path: bf16-rounded activations, on the AMX tiles
                      // where present, else vdpbf16ps; the ratio is to that unit's peak.
                      if (m.bf16_gflops > 0 && bf16_dot_available()) {
                        const bool amx = m.amx_bf16_gflops > 0;
                        const double before = amx ? 0.0 : measure_bf16_peak_once(pool);
                        BenchResult r = bench_gemm(pool, m, rows, cols, n, reps, Precision::kBf16);
                        const double peak =
                            amx ? m.amx_bf16_gflops : std::max({m.bf16_gflops, before, measure_bf16_peak_once(pool)});
                        as_bf16_figure(r, "gemm_bf16act_" + std::to_string(rows) + "x" + std::to_string(cols) + "_n" + std::to_string(n),
                                       peak, amx ? "AMX bf16 tile peak (--precision bf16)" : bf16_limit(peak, "--precision bf16"),
                                       exact, "GEMM");
                        out.push_back(r);
                      }
                    }});
  }
  if (want("kda")) {
    jobs.push_back({"kda", [&] {
                      const int H = q ? 8 : 96, D = q ? 32 : 128;
                      const int64_t T = q ? 256 : 4096;
                      const double flops = 4.0 * H * D * D * T;  // the recurrence's work per token
                      KdaData chunk = make_kda(H, D, T), rec = make_kda(H, D, T);
                      const Timed tc = time_it(pool, reps, false, [&] { run_kda(pool, chunk, true); });
                      const Timed tr = time_it(pool, std::max(1, reps / 2), false, [&] { run_kda(pool, rec, false); });
                      BenchResult c = flops_result("kda_prefill_" + std::to_string(H) + "x" + std::to_string(D) + "_t" + std::to_string(T),
                                                   flops, tc, m.fp32_gflops, "fp32 FMA peak (4*K*V per token per head)");
                      BenchResult r = flops_result("kda_recurrent_" + std::to_string(H) + "x" + std::to_string(D) + "_t" + std::to_string(T),
                                                   flops, tr, m.fp32_gflops, "fp32 FMA peak (4*K*V per token per head)");
                      for (BenchResult* b : {&c, &r}) {
                        b->limit_kind = BenchResult::Limit::kFp32;
                        b->limit_value = m.fp32_gflops;
                        b->limit_detail = "4*K*V per token per head";
                      }
                      c.note = "chunked form: " + std::to_string(tr.seconds.median / tc.seconds.median).substr(0, 5) +
                               "x the token-by-token recurrence per token";
                      out.push_back(c);
                      out.push_back(r);
                      // Decode: one token per step, states of many layers rotated (beyond the LLC).
                      const int layers = rotation(m, static_cast<uint64_t>(H) * D * D * 4, 3, 2, q);
                      std::vector<KdaData> steps;
                      for (int l = 0; l < layers; ++l) steps.push_back(make_kda(H, D, 1));
                      int next = 0;
                      std::vector<ByteSpan> own;
                      for (const KdaData& st : steps) own.push_back({st.state.data(), st.state.size() * sizeof(float)});
                      const Timed td = time_it(
                          pool, reps, !q,
                          [&] {
                            run_kda(pool, steps[next], false);
                            next = (next + 1) % layers;
                          },
                          own, layers);
                      BenchResult dres = bandwidth_result("kda_decode_" + std::to_string(H) + "x" + std::to_string(D),
                                                          2.0 * H * D * D * 4, td, m);
                      dres.note = "state read + written once per token; " + std::to_string(layers) + " layer states rotated";
                      out.push_back(dres);
                    }});
  }
  if (want("mla")) {
    for (int64_t ctx : {int64_t{1024}, int64_t{32768}}) {
      jobs.push_back({"mla_decode", [&, ctx] {
                        const int H = q ? 8 : 96, lora = q ? 64 : 512, rope = q ? 16 : 64, width = lora + rope;
                        const int64_t n = q ? ctx / 16 : ctx;
                        const uint64_t bytes = static_cast<uint64_t>(n) * width * 4;
                        const int layers = rotation(m, bytes, 3, 1, q);
                        std::vector<AlignedVector<float>> caches(layers, AlignedVector<float>(n * width));  // as SequenceState holds them
                        for (int l = 0; l < layers; ++l) fill_f32(caches[l], 40 + l, 1.0f);
                        std::vector<float> qv(H * width), o(H * lora);
                        fill_f32(qv, 9, 0.1f);
                        int next = 0;
                        std::vector<ByteSpan> own;
                        for (const AlignedVector<float>& c : caches) own.push_back({c.data(), bytes});
                        const Timed t = time_it(
                            pool, reps, !q,
                            [&] {
                              mla_decode_attention(qv.data(), caches[next].data(), n, H, lora, rope, 0.0721f, o.data());
                              next = (next + 1) % layers;
                            },
                            own, layers);
                        BenchResult r = bandwidth_result(
                            "mla_decode_" + (n >= 1024 ? std::to_string(n / 1024) + "k" : std::to_string(n)), static_cast<double>(bytes), t, m);
                        // The absorbed form does 2 * (width + lora) FLOP per head and cache row, ~90 FLOP
                        // per cache byte at K3's 96 heads: it is bound by arithmetic, so the note also
                        // rates it against the fp32 FMA peak (the higher of the machine figure and a probe now).
                        const double gflops = 2.0 * H * (width + lora) * static_cast<double>(n) / t.seconds.median / 1e9;
                        const double peak = std::max(m.fp32_gflops, measure_fp32_peak_once(pool));
                        char compute[160];
                        std::snprintf(compute, sizeof compute, "; compute %.0f GFLOP/s, %.0f%% of the fp32 FMA peak (%.0f FLOP per cache byte)",
                                      gflops, peak > 0 ? 100.0 * gflops / peak : 0.0, 2.0 * H * (width + lora) / (width * 4.0));
                        r.note = std::to_string(H) + " heads over a " + std::to_string(width) + "-wide fp32 latent cache, " +
                                 std::to_string(layers) + " layer caches rotated" + compute;
                        out.push_back(r);
                      }});
    }
  }
  if (want("mla")) {
    // Prefill: a chunk of `len` new tokens at the end of a `ctx`-token cache (what a chunked
    // prefill of a long prompt runs per MLA layer; 256 as the server steps, 2048 as generate).
    // FLOPs: the causal score and value products plus the decompression of the cached keys and
    // values, which each chunk redoes.
    for (auto [ctx, len] : {std::pair<int64_t, int64_t>{16384, 256}, {32768, 256}, {32768, 2048}}) {
      jobs.push_back({"mla_prefill", [&, ctx, len] {
                        const MlaPrefillShape sh{q ? 8 : 96, q ? 32 : 128, q ? 16 : 64, q ? 32 : 128, q ? 64 : 512};
                        const int64_t n = q ? ctx / 16 : ctx, l = q ? len / 8 : len, pos0 = n - l;
                        AlignedVector<float> cache(n * sh.width()), qv(l * sh.heads * sh.qk()), o(l * sh.heads * sh.vdim);
                        fill_f32(cache, 51, 1.0f);
                        fill_f32(qv, 52, 0.3f);
                        std::vector<uint16_t> kvb(static_cast<size_t>(sh.heads) * (sh.nope + sh.vdim) * sh.lora);
                        fill_bf16(pool, kvb, 53);
                        Matrix w;
                        w.format = WeightFormat::kBF16;
                        w.rows = static_cast<int64_t>(sh.heads) * (sh.nope + sh.vdim);
                        w.cols = sh.lora;
                        w.data = kvb.data();
                        const double attn = mla_prefill_attention_macs(sh, pos0, l), dec = mla_prefill_decompress_macs(sh, pos0, l);
                        const std::string tag = (n >= 1024 ? std::to_string(n / 1024) + "k" : std::to_string(n)) + "_chunk" + std::to_string(l);
                        BenchResult r = fp32_flops_figure(pool, m, "mla_prefill_" + tag, 2.0 * (attn + dec), reps, [&] {
                          mla_prefill_attention(w, sh, qv.data(), cache.data(), pos0, l, 0.0721f, o.data(), sh.heads * sh.vdim);
                        });
                        r.limit_detail = "causal scores and values, plus decompressing the cached keys and values";
                        // The absorbed form (what decode runs) over the same queries, for the
                        // choice between the two (mla_prefill_prefers_decompressed).
                        AlignedVector<float> qa(sh.heads * sh.width()), oa(sh.heads * sh.lora);
                        fill_f32(qa, 54, 0.1f);
                        const int64_t probe = std::min<int64_t>(l, 32);
                        const Timed ta = time_it(pool, 1, false, [&] {
                          for (int64_t i = pos0; i < pos0 + probe; ++i)
                            mla_decode_attention(qa.data(), cache.data(), i + 1, sh.heads, sh.lora, sh.rope, 0.0721f, oa.data());
                        });
                        const double absorbed_s = ta.seconds.median / probe * l;
                        char note[240];
                        std::snprintf(note, sizeof note,
                                      "%.1f%% of its FLOPs decompress (the attention's own at %.0f GFLOP/s); the absorbed form's "
                                      "attention alone would take %.2fx as long",
                                      100.0 * dec / (attn + dec), r.value * attn / (attn + dec),
                                      absorbed_s / (2.0 * (attn + dec) / r.value / 1e9));
                        r.note = note;
                        out.push_back(r);
                      }});
    }
  }
  Progress progress("kernel benchmarks", jobs.size());
  for (auto& [label, job] : jobs) {
    log_info("bench: ", label);
    job();
    progress.advance();
  }
  return out;
}

}  // namespace k3
