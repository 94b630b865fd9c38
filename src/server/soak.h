// `k3 loadtest --soak DURATION`: holds a running k3 serve under a mixed load for a set time, then
// checks that every request is accounted for, by this client and by the server's /metrics, that
// the server still answers, and that its resident memory stayed within a bound after a warm-up.
//
// `concurrency` clients send requests back to back until the time is up (a request started before
// then runs to its end).  Request i's kind and parameters follow from (seed, i) alone: the same
// seed gives the same mix.  The kinds (SoakKind) are valid chat requests (streamed or not, with
// tools, n = 2..3, an image, a json_schema response_format), planned client disconnects (a stream
// dropped after k events; a client that gives up before the headers), and requests the server must
// refuse with a given status (malformed JSON, wrong types, an unknown model, a body over the
// server's limit, a prompt longer than the context, max_tokens past 2^63).
//
// Each request ends as exactly one of:
//   ok            a complete, well-formed answer (JSON checked: choices, finish reasons, usage;
//                 tool_choice required gave tool calls unless max_tokens cut the reply, finish
//                 reason length; a json_schema answer that stopped is the object asked for);
//   disconnected  the client left on purpose before the end;
//   rejected      the expected error status with an OpenAI error envelope (an image sent to a
//                 model without a vision tower: 400 images_not_supported);
//   unexpected    anything else (a wrong status, a transport error that was not planned, a
//                 malformed answer, an error event in a stream).  Any one fails the soak.
// Once the load ends the soak waits for the server to drain (k3_requests_running and _waiting 0,
// its API request ledger settled, metrics.h), then checks over the soak's span (the counters at
// the end less those at the start):
//   k3_api_requests_total == requests sent
//   k3_api_requests_total == completed + cancelled + sum of k3_requests_rejected_total{status}
//   k3_requests_rejected_total{status} == this client's rejections with that status, per status
//   completed + cancelled == ok + disconnected, and completed >= ok
// Memory: k3_process_resident_memory_bytes, read about once a second.  The warm-up sample is the
// first one after warmup_fraction of the duration; growth = (sample after the drain) - (warm-up
// sample) must not exceed rss_growth_bound_bytes.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace k3::server {

enum class SoakKind : int {
  kChat,              // non-streamed chat
  kChatStream,        // streamed chat, include_usage at random
  kTools,             // a function tool, tool_choice auto or required, streamed or not, 48..128 tokens
  kChoices,           // n = 2..3, streamed or not
  kImage,             // a small PNG in a data: URL, streamed or not
  kJsonSchema,        // response_format json_schema, streamed or not
  kDisconnectStream,  // streamed; the client drops the connection after k = 0..6 events
  kDisconnectEarly,   // non-streamed; the client gives up after 5..300 ms, before the headers
  kMalformedJson,     // truncated JSON, not JSON, a JSON array, an empty body: 400
  kWrongType,         // messages a string, max_tokens / temperature a string, tools an object: 400
  kUnknownModel,      // model "no-such-model-…": 404
  kOversizedBody,     // a body max_body_bytes + 64 KiB long: 413
  kLongPrompt,        // a prompt of the whole context (chat text or completion ids): 400
  kHugeMaxTokens,     // max_tokens 1e19 or 2^64 - 1: 400
  kCount
};
inline constexpr int kSoakKinds = static_cast<int>(SoakKind::kCount);
// "chat", "chat_stream", "tools", ... (the names in the report and its JSON).
const char* soak_kind_name(SoakKind kind);

struct SoakOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string api_key;
  std::string model;  // "" = the server's own (from /v1/models)
  double duration_s = 60;
  int concurrency = 64;
  uint64_t seed = 0;  // 0 = drawn at random; the result says which
  int max_tokens = 16;  // the most new tokens of a valid request (tools and json_schema: at least 48)
  // The share of the duration after which the warm-up memory sample is taken.
  double warmup_fraction = 0.1;
  // 64 MiB: after the warm-up the server's arenas, thread stacks and caches have their working
  // size, and the soak's prompts come from a fixed pool, so what stays is steady; a leak of 1 KiB
  // per request shows past it within 64k requests (about half an hour at 35 requests/s).
  uint64_t rss_growth_bound_bytes = 64ull << 20;
  // The server's --max-body-mb (its default, 32 MiB): the oversized kind sends 64 KiB more.
  uint64_t max_body_bytes = 32ull << 20;
  double drain_timeout_s = 120;  // how long the server may take to settle after the load
};

struct SoakKindStats {
  uint64_t sent = 0, ok = 0, disconnected = 0, unexpected = 0;
  std::map<int, uint64_t> rejected;  // by HTTP status
  uint64_t rejected_total() const;
};

struct SoakResult {
  uint64_t seed = 0;
  int concurrency = 0;
  double duration_s = 0;  // asked for
  double wall_s = 0;      // from the first request to the last answer
  std::array<SoakKindStats, kSoakKinds> kinds{};
  SoakKindStats total() const;
  std::vector<std::string> unexpected_examples;  // the first 20, "kind #i: what happened"

  // The server's ledger over the soak (metrics.h); valid when `ledger_read`.
  bool ledger_read = false;
  uint64_t received = 0, completed = 0, cancelled = 0;
  std::map<int, uint64_t> server_rejected;
  uint64_t server_rejected_total() const;
  double drain_s = 0;  // from the last answer until the server was idle and settled

  // Resident memory of the server (bytes; 0 when not read).
  uint64_t rss_start = 0, rss_warmup = 0, rss_end = 0, rss_max = 0;
  uint64_t rss_growth_bound = 0;
  uint64_t prefix_cache_warmup = 0, prefix_cache_end = 0;  // k3_prefix_cache_bytes, for context
  // About 20 samples spread over the soak, {seconds since the start, RSS bytes}: the shape of the
  // growth (a plateau or a slope).
  std::vector<std::pair<double, uint64_t>> rss_series;

  // Every check that failed, in words; empty = the soak passed.
  std::vector<std::string> failures;
  bool passed() const { return failures.empty(); }
};

// "90", "90s", "30m", "2h", "1.5h" -> seconds.  Throws k3::Error for anything else or a duration
// that is not positive.
double parse_soak_duration(const std::string& text);

// Throws k3::Error, before any request, for a bad option or a server that does not answer
// /health and /v1/models; everything after that (a server that dies mid-soak included) is a
// failure in the result.
SoakResult run_soak(const SoakOptions& options);

// The report: per kind sent / ok / disconnected / rejected (by status) / unexpected, the ledger
// identity, memory, requests per second and PASSED or FAILED with the reasons.
std::string soak_report(const SoakResult& result);
// The same as a JSON document.
std::string soak_json(const SoakResult& result);

}  // namespace k3::server
