// Google Benchmark for the linear kernels on one thread, in two regimes:
//   *_hot:  the weights fit in L2, so the figure is the kernel's arithmetic / decode throughput
//           (what must stay well above the per-core memory bandwidth for decode to be bound by it);
//   *_cold: weights rotated over far more than the LLC (the decode regime; noisy on shared VMs).
// CPU time is reported, which makes comparisons between variants usable on a busy machine.
// Run e.g.  ./linear_bench --benchmark_filter=mxfp4   (K3_ISA=avx2 for the AVX2 path).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "base/numeric_types.h"
#include "base/thread_pool.h"
#include "kernels/linear.h"
#include "perf/machine.h"

namespace k3 {
namespace {

uint64_t next(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

struct Weights {
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> packed, scales;
  Matrix m;
};

Weights make(WeightFormat f, int64_t rows, int64_t cols, uint64_t seed) {
  Weights w;
  uint64_t s = seed | 1;
  w.m = Matrix{f, rows, cols, nullptr, nullptr};
  if (f == WeightFormat::kBF16) {
    w.bf16.resize(rows * cols);
    for (auto& v : w.bf16) v = static_cast<uint16_t>(((next(s) & 1) << 15) | ((118 + next(s) % 8) << 7) | (next(s) & 0x7f));
    w.m.data = w.bf16.data();
  } else {
    w.packed.resize(rows * cols / 2);
    w.scales.resize(rows * cols / 32);
    for (auto& v : w.packed) v = static_cast<uint8_t>(next(s));
    for (auto& v : w.scales) v = static_cast<uint8_t>(118 + next(s) % 6);
    w.m.data = w.packed.data();
    w.m.scales = w.scales.data();
  }
  return w;
}

// args: rows, cols, tokens, copies (1 = hot)
void BM_linear(benchmark::State& st, WeightFormat f) {
  set_num_threads(1);
  const int64_t rows = st.range(0), cols = st.range(1), n = st.range(2), copies = st.range(3);
  std::vector<Weights> ws;
  for (int64_t i = 0; i < copies; ++i) ws.push_back(make(f, rows, cols, 7 + i));
  std::vector<float> x(n * cols), y(n * rows);
  uint64_t s = 3;
  for (auto& v : x) v = static_cast<float>(next(s) % 2001) / 1000.0f - 1.0f;
  int64_t i = 0;
  for (auto _ : st) {
    linear(ws[i].m, x.data(), n, y.data());
    i = (i + 1) % copies;
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GB/s"] = benchmark::Counter(static_cast<double>(ws[0].m.bytes()) * st.iterations(), benchmark::Counter::kIsRate);
  st.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * rows * cols * n * st.iterations(), benchmark::Counter::kIsRate);
}

void bf16(benchmark::State& st) { BM_linear(st, WeightFormat::kBF16); }
void mxfp4(benchmark::State& st) { BM_linear(st, WeightFormat::kMxfp4); }

// The machine's fp32 FMA peak on this thread (the same probe k3 bench uses), for ratios.
void fma_peak(benchmark::State& st) {
  double flops = 0;
  for (auto _ : st) flops += perf_isa::fma_loop_avx512(1 << 16);
  st.counters["GFLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsRate);
}
BENCHMARK(fma_peak);

BENCHMARK(mxfp4)->Name("mxfp4_gemv_hot")->Args({512, 3584, 1, 1});
BENCHMARK(mxfp4)->Name("mxfp4_gemv_cold")->Args({3072, 3584, 1, 160});
BENCHMARK(mxfp4)->Name("mxfp4_gemm_hot")->Args({256, 3584, 64, 1});
BENCHMARK(bf16)->Name("bf16_gemv_hot")->Args({256, 3584, 1, 1});
BENCHMARK(bf16)->Name("bf16_gemv_cold")->Args({2048, 7168, 1, 40});
BENCHMARK(bf16)->Name("gemm_bf16")->Args({1024, 4096, 256, 1});
BENCHMARK(bf16)->Name("gemm_bf16_l2")->Args({32, 4096, 48, 1});

}  // namespace
}  // namespace k3

BENCHMARK_MAIN();
