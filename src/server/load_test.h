// `k3 loadtest`: measures a running server's output throughput at several concurrency levels.
// At each level, `concurrency` clients each send `rounds` streamed /v1/completions requests
// (max_tokens new tokens, ignore_eos, greedy) back to back; output tokens/s is all completion
// tokens (from each stream's usage chunk) over the level's wall time.  A request that fails (HTTP
// error, transport error, a stream without usage.completion_tokens) is counted, and each level
// keeps the first failure's reason so a bad key or model id is visible, not just a count.
#pragma once

#include <httplib.h>

#include <memory>
#include <string>
#include <vector>

namespace k3::server {

// A server base URL, http[s]://HOST[:PORT], taken apart (shared with the soak, soak.h).
struct LoadTarget {
  bool https = false;
  std::string host;  // without the brackets of an IPv6 literal
  int port = 0;
};
// Throws k3::Error naming what is wrong with `url` (no scheme, a path, a bad port, ...).
LoadTarget parse_load_target(const std::string& url);
// An HTTP(S) client for the target (httplib's defaults: set its timeouts).
std::unique_ptr<httplib::ClientImpl> make_load_client(const LoadTarget& target);
// The Authorization header for a Bearer key; no header for "".
httplib::Headers bearer_auth(const std::string& api_key);
// "HTTP 401: invalid API key" (the OpenAI envelope's error.message, else the body's start), or
// "HTTP 502" when the body says nothing.
std::string describe_http_failure(int status, const std::string& body);

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
  // "" when no request failed; else the first failure's reason, e.g. "HTTP 401: invalid API key"
  // or "no answer (httplib error: Connection)".
  std::string first_error;
};

// The most client threads one level may ask for: beyond it the client machine, not the server,
// is what gets measured (and thread creation may fail).
inline constexpr int kMaxLoadTestConcurrency = 4096;

// Throws k3::Error, before any request is sent, for a bad option (url not http[s]://HOST[:PORT],
// a concurrency level outside [1, kMaxLoadTestConcurrency], rounds or max_tokens < 1), when the
// server's /health does not answer 200, or when a level's client threads cannot be started.
std::vector<LoadTestLevel> run_load_test(const LoadTestOptions& options);

}  // namespace k3::server
