#include "server/metrics.h"

#include <unistd.h>

#include <cstdio>

namespace k3::server {
namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void scalar(std::string& out, const char* name, const char* type, const char* help, double value) {
  out += cat("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name, " ", num(value), "\n");
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += value;
  ++count_;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> lock(mu_);
  out += cat("# HELP ", name, " ", help, "\n# TYPE ", name, " histogram\n");
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += cat(name, "_bucket{le=\"", num(bounds_[i]), "\"} ", cum, "\n");
  }
  cum += counts_.back();
  out += cat(name, "_bucket{le=\"+Inf\"} ", cum, "\n", name, "_sum ", num(sum_), "\n", name, "_count ", count_, "\n");
}

ServerMetrics::ServerMetrics()
    // Up to an hour: a CPU prefills a long prompt at tens of tokens per second (32k tokens: minutes).
    : ttft({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 60.0,
            120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0}),
      per_token({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}) {}

void ServerMetrics::count_finish(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_[reason];
}

void ServerMetrics::count_received() { received_.fetch_add(1, std::memory_order_relaxed); }
void ServerMetrics::count_completed() { completed_.fetch_add(1, std::memory_order_relaxed); }
void ServerMetrics::count_cancelled() { cancelled_.fetch_add(1, std::memory_order_relaxed); }

uint64_t process_resident_bytes() {
  // statm: size resident shared text lib data dt, in pages.  One read of a small proc file: cheap
  // enough for every scrape.
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  const long page = sysconf(_SC_PAGESIZE);
  if (got != 2 || page <= 0) return 0;
  return static_cast<uint64_t>(resident) * static_cast<uint64_t>(page);
}

void ServerMetrics::count_rejected(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++rejected_[status];
}

std::string ServerMetrics::render(const SchedulerStats* stats, uint64_t memory_budget) const {
  const SchedulerStats s = stats ? *stats : SchedulerStats{};
  std::string out;
  scalar(out, "k3_requests_running", "gauge", "Requests holding a sequence slot.", static_cast<double>(s.running));
  scalar(out, "k3_requests_waiting", "gauge", "Requests queued for a slot.", static_cast<double>(s.waiting));
  scalar(out, "k3_prompt_tokens_total", "counter", "Prompt tokens prefilled.", static_cast<double>(s.prompt_tokens));
  scalar(out, "k3_generation_tokens_total", "counter", "Tokens generated.", static_cast<double>(s.tokens_generated));
  {
    std::lock_guard<std::mutex> lock(mu_);
    out += "# HELP k3_requests_finished_total Generation requests finished, by finish reason.\n"
           "# TYPE k3_requests_finished_total counter\n";
    for (const char* r : {"stop", "length", "tool_calls", "cancelled", "error"}) {
      auto it = finished_.find(r);
      out += cat("k3_requests_finished_total{reason=\"", r, "\"} ", it == finished_.end() ? 0 : it->second, "\n");
    }
    out += "# HELP k3_requests_rejected_total API requests answered with an error status.\n"
           "# TYPE k3_requests_rejected_total counter\n";
    for (const auto& [status, n] : rejected_) out += cat("k3_requests_rejected_total{status=\"", status, "\"} ", n, "\n");
  }
  // Read after the rejections: a request settled between the reads can only make the settled
  // side look short, never received look short (they are read received last).
  scalar(out, "k3_api_requests_completed_total", "counter", "API requests answered in full (2xx).",
         static_cast<double>(completed_.load()));
  scalar(out, "k3_api_requests_cancelled_total", "counter", "API requests whose client went away before the answer.",
         static_cast<double>(cancelled_.load()));
  scalar(out, "k3_api_requests_total", "counter",
         "API requests received (= completed + cancelled + rejected once none is in flight).",
         static_cast<double>(received_.load()));
  scalar(out, "k3_process_resident_memory_bytes", "gauge", "Resident memory of the server process.",
         static_cast<double>(process_resident_bytes()));
  ttft.render(out, "k3_time_to_first_token_seconds", "Seconds from request arrival to its first generated token.");
  per_token.render(out, "k3_time_per_output_token_seconds", "Seconds between consecutive generated tokens of a request.");
  scalar(out, "k3_cache_bytes", "gauge", "Bytes of sequence states and MLA caches held now.",
         static_cast<double>(s.state_bytes));
  scalar(out, "k3_cache_reserved_bytes", "gauge", "Bytes reserved for running sequences at their full length.",
         static_cast<double>(s.reserved_bytes));
  scalar(out, "k3_cache_budget_bytes", "gauge", "The state memory budget (0 = unlimited).",
         static_cast<double>(memory_budget));
  scalar(out, "k3_cache_usage_ratio", "gauge", "Reserved bytes over the budget (0 when unlimited).",
         memory_budget ? static_cast<double>(s.reserved_bytes) / static_cast<double>(memory_budget) : 0.0);
  const PrefixCacheStats& pc = s.prefix_cache;
  scalar(out, "k3_prefix_cache_bytes", "gauge", "Bytes of cached prompt-prefix states.", static_cast<double>(pc.bytes));
  scalar(out, "k3_prefix_cache_entries", "gauge", "Cached prompt prefixes.", static_cast<double>(pc.entries));
  scalar(out, "k3_prefix_cache_hits_total", "counter", "Requests that started from a cached prefix.",
         static_cast<double>(pc.hits));
  scalar(out, "k3_prefix_cache_misses_total", "counter", "Requests that found no cached prefix.",
         static_cast<double>(pc.misses));
  scalar(out, "k3_prefix_cache_evictions_total", "counter", "Cached prefixes dropped for room.",
         static_cast<double>(pc.evictions));
  scalar(out, "k3_prompt_tokens_cached_total", "counter", "Prompt tokens taken from the prefix cache, not prefilled.",
         static_cast<double>(pc.tokens_reused));
  return out;
}

}  // namespace k3::server
