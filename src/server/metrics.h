// The server's Prometheus metrics (GET /metrics, text exposition format 0.0.4):
//   k3_requests_running / k3_requests_waiting           gauges (scheduler slots and queue)
//   k3_prompt_tokens_total / k3_generation_tokens_total  counters (prefilled / generated)
//   k3_requests_finished_total{reason}                   counter per finish reason, per choice (a
//                                                        request with n = 3 finishes 3 times)
//   k3_api_requests_total                                counter of API requests received
//   k3_api_requests_completed_total                      counter of API requests answered in full
//   k3_api_requests_cancelled_total                      counter of API requests the client left
//   k3_requests_rejected_total{status}                   counter of API requests answered 4xx/5xx
//   k3_process_resident_memory_bytes                     gauge: the server's resident memory
//   k3_time_to_first_token_seconds                       histogram (arrival -> first token)
//   k3_time_per_output_token_seconds                     histogram (gap between tokens)
//   k3_cache_bytes / k3_cache_reserved_bytes / k3_cache_budget_bytes / k3_cache_usage_ratio
//   k3_prefix_cache_bytes / _entries (gauges), k3_prefix_cache_hits_total / _misses_total /
//   _evictions_total and k3_prompt_tokens_cached_total (counters): the prompt-prefix cache
// Histograms and counters are thread-safe; the engine thread observes latencies.
//
// The API request ledger.  An API request is one HTTP request to /v1/*, /tokenize or /detokenize
// (the paths an API key guards), whatever its n.  Each is counted once on arrival (received) and
// once when it is settled, as exactly one of:
//   completed  answered with a 2xx status in full: a JSON body handed to the connection, or a
//              stream that reached data: [DONE] (a stream whose generation failed after the 200
//              status ends with an error event and [DONE]: completed here, and counted as
//              finished{reason="error"});
//   cancelled  the client went away first: a non-streamed request whose client hung up while it
//              generated (no answer is written), or a stream that ended before [DONE];
//   rejected   answered with an error status (by status; a bad key, a bad body, 429 busy, ...).
// So once no request is in flight (k3_requests_running and _waiting are 0 and no client is
// still being answered):
//   k3_api_requests_total == k3_api_requests_completed_total + k3_api_requests_cancelled_total
//                            + sum over status of k3_requests_rejected_total{status}
// k3_requests_finished_total counts choices as the scheduler ends them, so it is no part of it.
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
  // The API request ledger (above): one count_received and one of the other three per request.
  void count_received();
  void count_completed();
  void count_cancelled();
  void count_rejected(int status);
  // The whole exposition; `stats` is null while the model loads.
  std::string render(const SchedulerStats* stats, uint64_t memory_budget) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> finished_;
  std::map<int, uint64_t> rejected_;
  std::atomic<uint64_t> received_{0}, completed_{0}, cancelled_{0};
};

// This process's resident set size in bytes (/proc/self/statm); 0 where it cannot be read.
uint64_t process_resident_bytes();

}  // namespace k3::server
