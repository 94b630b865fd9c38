#include "perf/machine.h"

#include <unistd.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "perf/stopwatch.h"

namespace k3 {

uint64_t last_level_cache_bytes() {
  uint64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string s;
    if (!(f >> s) || s.empty()) continue;
    uint64_t v = std::strtoull(s.c_str(), nullptr, 10);
    if (s.back() == 'K') v <<= 10;
    if (s.back() == 'M') v <<= 20;
    best = std::max(best, v);
  }
  if (best == 0) {
    const long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (v > 0) best = static_cast<uint64_t>(v);
  }
  return best > 0 ? best : (32ull << 20);
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t c = line.find(':');
      return c == std::string::npos ? line : line.substr(c + 2);
    }
  return "unknown";
}

namespace {

// The probe reads memory of the kind weights live in: anonymous, in 2 MiB pages where the
// kernel gives them (as the weight store and the huge-page loader place weights), so that its
// figure is the limit a decode reading weights meets, not that of 4 KiB pages.
struct AlignedBuffer {
  explicit AlignedBuffer(size_t floats) : n(floats), bytes(floats * sizeof(float)) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    ::madvise(p, bytes, MADV_HUGEPAGE);
    data = static_cast<float*>(p);
  }
  ~AlignedBuffer() { ::munmap(data, bytes); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  float* data;
  size_t n;
  size_t bytes;
};

uint64_t default_bytes() { return std::max<uint64_t>(1ull << 30, 4 * last_level_cache_bytes()); }

AlignedBuffer& probe_buffer(ThreadPool& pool, uint64_t bytes) {
  static std::unique_ptr<AlignedBuffer> buf;
  const size_t floats = bytes / sizeof(float);
  if (!buf || buf->n != floats) {
    buf.reset();
    buf = std::make_unique<AlignedBuffer>(floats);
    // First touch from the threads that will read it.
    pool.parallel_for(static_cast<int64_t>(floats), 4096, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) buf->data[i] = 1.0f;
    });
  }
  return *buf;
}

// XOR of every 8-byte word of [p, p + n) (n a multiple of 256), through the ISA's widest loads.
uint64_t xor_bytes(const uint8_t* p, int64_t n) {
  switch (active_isa()) {
    case Isa::kAmx:
    case Isa::kAvx512: return perf_isa::xor_bytes_avx512(p, n);
    case Isa::kAvx2: return perf_isa::xor_bytes_avx2(p, n);
    case Isa::kRef: break;
  }
  uint64_t x = 0;
  for (int64_t i = 0; i < n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    x ^= w;
  }
  return x;
}

// Reads every piece once with xor_bytes (sizes multiples of 256 bytes), the pieces spread over
// the pool's threads: GB/s of the whole read.
double timed_xor_read(ThreadPool& pool, const std::vector<ByteSpan>& pieces) {
  uint64_t total = 0;
  for (const ByteSpan& p : pieces) total += p.bytes;
  if (total == 0) return 0.0;
  std::vector<uint64_t> sink(pool.size());
  const double t0 = now_seconds();
  pool.parallel_for(static_cast<int64_t>(pieces.size()), 1, [&](int64_t b, int64_t e, int th) {
    for (int64_t i = b; i < e; ++i)
      sink[th] ^= xor_bytes(static_cast<const uint8_t*>(pieces[i].data), static_cast<int64_t>(pieces[i].bytes));
  });
  const double dt = now_seconds() - t0;
  volatile uint64_t keep = sink[0];
  (void)keep;
  return static_cast<double>(total) / dt / 1e9;
}

}  // namespace

double measure_read_gbps_once(ThreadPool& pool, uint64_t bytes) {
  if (bytes == 0) bytes = default_bytes();
  const AlignedBuffer& buf = probe_buffer(pool, bytes);
  // A few long pieces per thread (4 KB multiples), each read as xor_bytes' four streams.
  const uint64_t size = buf.n * sizeof(float);
  const uint64_t parts = 4 * static_cast<uint64_t>(pool.size());
  std::vector<ByteSpan> pieces;
  for (uint64_t p = 0; p < parts; ++p) {
    const uint64_t b = size * p / parts / 4096 * 4096, e = p + 1 == parts ? size / 256 * 256 : size * (p + 1) / parts / 4096 * 4096;
    if (e > b) pieces.push_back({reinterpret_cast<const uint8_t*>(buf.data) + b, e - b});
  }
  return timed_xor_read(pool, pieces);
}

double measure_read_gbps_spans(ThreadPool& pool, const std::vector<ByteSpan>& spans) {
  // Pieces of 8 MiB (whole multiples of 256 bytes; the few bytes past the last multiple of a
  // span are left out of both the read and the count), spread over the threads: long streams
  // for xor_bytes (1 MiB pieces made 256 KB ones), short enough to balance the threads.  Without
  // software prefetch this can still read a GEMV's matrices slower than the GEMV does, so callers
  // take it as one probe among several.
  constexpr uint64_t kPiece = uint64_t{8} << 20;
  std::vector<ByteSpan> pieces;
  for (const ByteSpan& s : spans)
    for (uint64_t off = 0; off + 256 <= s.bytes; off += kPiece)
      pieces.push_back({static_cast<const uint8_t*>(s.data) + off, std::min(kPiece, s.bytes - off) / 256 * 256});
  return timed_xor_read(pool, pieces);
}

void measure_read_bandwidth(ThreadPool& pool, MachineLimits* out, int reps, uint64_t bytes) {
  measure_read_gbps_once(pool, bytes);  // warm-up (page faults, frequency)
  std::vector<double> v;
  for (int i = 0; i < reps; ++i) v.push_back(measure_read_gbps_once(pool, bytes));
  const Summary s = summarize(v);
  out->read_gbps = s.median;
  out->read_gbps_min = s.min;
  out->read_gbps_max = s.max;
}

namespace {
// All threads run `loop`; the aggregate GFLOP/s, median of `reps`.
double flops_rate(ThreadPool& pool, double (*loop)(int64_t), int reps, int64_t iters) {
  std::vector<double> v;
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<double> flops(pool.size());
    const double t0 = now_seconds();
    pool.run(pool.size(), [&](int64_t t, int) { flops[t] = loop(iters); });
    const double dt = now_seconds() - t0;
    double total = 0;
    for (double f : flops) total += f;
    v.push_back(total / dt / 1e9);
  }
  return summarize(v).median;
}
}  // namespace

double measure_fp32_peak_once(ThreadPool& pool) {
  const Isa isa = active_isa();
  if (isa >= Isa::kAvx512) return flops_rate(pool, &perf_isa::fma_loop_avx512, 3, 500'000);
  if (isa == Isa::kAvx2) return flops_rate(pool, &perf_isa::fma_loop_avx2, 3, 500'000);
  return 0.0;
}

double measure_bf16_peak_once(ThreadPool& pool) {
  if (active_isa() < Isa::kAvx512 || !cpu_features().avx512_bf16) return 0.0;
  return flops_rate(pool, &perf_isa::bf16_dot_loop_avx512, 3, 500'000);
}

void measure_peak_flops(ThreadPool& pool, MachineLimits* out) {
  const Isa isa = active_isa();
  auto rate = [&](double (*loop)(int64_t)) { return flops_rate(pool, loop, 5, 2'000'000); };
  if (isa >= Isa::kAvx512) out->fp32_gflops = rate(&perf_isa::fma_loop_avx512);
  else if (isa == Isa::kAvx2) out->fp32_gflops = rate(&perf_isa::fma_loop_avx2);
  out->bf16_gflops = isa >= Isa::kAvx512 && cpu_features().avx512_bf16 ? rate(&perf_isa::bf16_dot_loop_avx512) : 0.0;
  out->amx_bf16_gflops = isa == Isa::kAmx ? rate(&perf_isa::amx_bf16_loop) : 0.0;
  out->llc_bytes = last_level_cache_bytes();
  out->threads = pool.size();
  out->isa = isa_name(isa);
  out->cpu = cpu_model_name();
}

}  // namespace k3
