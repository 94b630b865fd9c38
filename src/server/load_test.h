// `k3 loadtest`: measures a running server's output throughput at several concurrency levels.
// At each level, `concurrency` clients each send `rounds` streamed /v1/completions requests
// (max_tokens new tokens, ignore_eos, greedy) back to back; output tokens/s is all completion
// tokens (from each stream's usage chunk) over the level's wall time.
#pragma once

#include <string>
#include <vector>

namespace k3::server {

struct LoadTestOptions {
  std::string url = "http://127.0.0.1:8000";
  std::vector<int> concurrency = {1, 4, 16};
  int max_tokens = 64;
  int rounds = 2;  // requests per client per level
  std::string prompt = "Write a long story about a lighthouse keeper.";
  std::string api_key;
  std::string model;  // "" = omit
};

struct LoadTestLevel {
  int concurrency = 0;
  int requests = 0;
  int failed = 0;
  long long output_tokens = 0;
  double wall_s = 0;
  double tokens_per_s = 0;
  double mean_ttft_s = 0;
  double mean_stream_tokens_per_s = 0;  // per request, after its first token
};

// Throws k3::Error when the server cannot be reached.
std::vector<LoadTestLevel> run_load_test(const LoadTestOptions& options);

}  // namespace k3::server
