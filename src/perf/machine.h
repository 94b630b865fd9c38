// Measuring the limits k3's speed is judged against (performance.md): streaming read bandwidth
// over a buffer far larger than the last-level cache with every thread busy, and the peak
// arithmetic rate of the fp32 FMA and bf16 dot-product units and of the AMX tiles.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace k3 {

class ThreadPool;

struct MachineLimits {
  double read_gbps = 0;        // GB/s (1e9 bytes), all threads, median of the repetitions
  double read_gbps_min = 0, read_gbps_max = 0;
  double fp32_gflops = 0;      // peak fp32 FMA rate, all threads (2 FLOP per lane per FMA)
  // The limits every ratio is finally taken against: the highest bandwidth / fp32 probe of the
  // whole bench run (apply_best_limits in perf/report.h).
  double read_gbps_best = 0, fp32_gflops_best = 0;
  double bf16_gflops = 0;      // peak AVX512-BF16 dot-product rate (0 if the CPU lacks it)
  double amx_bf16_gflops = 0;  // peak AMX-BF16 tile rate (0 below the amx dispatch level)
  uint64_t llc_bytes = 0;      // last-level cache size
  int threads = 0;
  std::string isa;
  std::string cpu;
};

uint64_t last_level_cache_bytes();
std::string cpu_model_name();

// Streaming-read bandwidth over `bytes` (default: max(1 GiB, 4 x LLC)), `reps` repetitions.
void measure_read_bandwidth(ThreadPool& pool, MachineLimits* out, int reps = 5, uint64_t bytes = 0);
double measure_read_gbps_once(ThreadPool& pool, uint64_t bytes = 0);
// Streaming-read bandwidth over given memory, all threads, read as integers (any bit pattern):
// e.g. the weights one decoded token reads, which may sit in faster or slower memory than the
// probe buffer above (on a VM a buffer's speed can differ markedly from the weights').
struct ByteSpan {
  const void* data = nullptr;
  uint64_t bytes = 0;
};
double measure_read_gbps_spans(ThreadPool& pool, const std::vector<ByteSpan>& spans);
void measure_peak_flops(ThreadPool& pool, MachineLimits* out);
// A short fp32 FMA peak probe (all threads), for limits taken around a run: the VM's arithmetic
// rate drifts too (another tenant on the same cores), and a ratio should use the higher figure.
double measure_fp32_peak_once(ThreadPool& pool);
// The same for the AVX512-BF16 dot-product rate (0 without it).
double measure_bf16_peak_once(ThreadPool& pool);

// ISA-specific inner loops (machine_avx512.cpp / machine_avx2.cpp).
namespace perf_isa {
// XOR of every 8-byte word: the streaming-read loops of both bandwidth probes.
uint64_t xor_bytes_avx512(const uint8_t* p, int64_t n);  // n a multiple of 256
uint64_t xor_bytes_avx2(const uint8_t* p, int64_t n);    // n a multiple of 128
// Each returns the number of floating-point operations performed.
double fma_loop_avx512(int64_t iters);
double fma_loop_avx2(int64_t iters);
double bf16_dot_loop_avx512(int64_t iters);
double amx_bf16_loop(int64_t iters);  // machine_amx.cpp
}  // namespace perf_isa

}  // namespace k3
