// The server's Prometheus metrics (GET /metrics, text exposition format 0.0.4):
//   k3_requests_running / k3_requests_waiting           gauges (scheduler slots and queue)
//   k3_prompt_tokens_total / k3_generation_tokens_total  counters (prefilled / generated)
//   k3_requests_finished_total{reason}                   counter per finish reason
//   k3_requests_rejected_total{status}                   counter of 4xx/5xx answers to API calls
//   k3_time_to_first_token_seconds                       histogram (arrival -> first token)
//   k3_time_per_output_token_seconds                     histogram (gap between tokens)
//   k3_cache_bytes / k3_cache_reserved_bytes / k3_cache_budget_bytes / k3_cache_usage_ratio
//   k3_prefix_cache_bytes / _entries (gauges), k3_prefix_cache_hits_total / _misses_total /
//   _evictions_total and k3_prompt_tokens_cached_total (counters): the prompt-prefix cache
// Histograms and counters are thread-safe; the engine thread observes latencies.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/scheduler.h"

namespace k3::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // Appends # HELP, # TYPE, the cumulative buckets, _sum and _count.
  void render(std::string& out, const std::string& name, const std::string& help) const;
  uint64_t count() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), + the +Inf bucket
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  Histogram ttft;
  Histogram per_token;
  void count_finish(const std::string& reason);
  void count_rejected(int status);
  // The whole exposition; `stats` is null while the model loads.
  std::string render(const SchedulerStats* stats, uint64_t memory_budget) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> finished_;
  std::map<int, uint64_t> rejected_;
};

}  // namespace k3::server
