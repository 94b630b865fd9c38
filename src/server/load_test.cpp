#include "server/load_test.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "text/py_json.h"

namespace k3::server {
namespace {

using Clock = std::chrono::steady_clock;

struct OneResult {
  bool ok = false;
  long long tokens = 0;
  double ttft = 0, total = 0;
};

OneResult one_request(const LoadTestOptions& o, int index) {
  httplib::Client cli(o.url);
  cli.set_read_timeout(600);
  ojson body = {{"prompt", cat(o.prompt, " (request ", index, ")")},
                {"max_tokens", o.max_tokens},
                {"temperature", 0},
                {"ignore_eos", true},
                {"stream", true},
                {"stream_options", {{"include_usage", true}}}};
  if (!o.model.empty()) body["model"] = o.model;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  if (!o.api_key.empty()) req.set_header("Authorization", "Bearer " + o.api_key);
  OneResult r;
  std::string buf;
  const Clock::time_point t0 = Clock::now();
  bool first = true;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (first) {
      r.ttft = std::chrono::duration<double>(Clock::now() - t0).count();
      first = false;
    }
    buf.append(data, n);
    size_t cut;
    while ((cut = buf.find("\n\n")) != std::string::npos) {
      const std::string ev = buf.substr(0, cut);
      buf.erase(0, cut + 2);
      if (ev.rfind("data: {", 0) != 0) continue;
      const ojson j = ojson::parse(ev.substr(6), nullptr, false);
      if (j.is_object() && j.contains("usage") && j["usage"].is_object())
        r.tokens = j["usage"]["completion_tokens"].get<long long>();
    }
    return true;
  };
  auto res = cli.send(req);
  r.total = std::chrono::duration<double>(Clock::now() - t0).count();
  r.ok = res && res->status == 200 && r.tokens > 0;
  return r;
}

}  // namespace

std::vector<LoadTestLevel> run_load_test(const LoadTestOptions& o) {
  {
    httplib::Client cli(o.url);
    auto h = cli.Get("/health");
    K3_CHECK(h && h->status == 200, "the server at ", o.url, " is not healthy (",
             h ? cat("HTTP ", h->status) : std::string("no answer"), ")");
  }
  std::vector<LoadTestLevel> out;
  for (int c : o.concurrency) {
    K3_CHECK(c >= 1, "concurrency must be >= 1 (got ", c, ")");
    LoadTestLevel level;
    level.concurrency = c;
    std::mutex mu;
    std::vector<OneResult> results;
    const Clock::time_point t0 = Clock::now();
    std::vector<std::thread> clients;
    std::atomic<int> next{0};
    for (int i = 0; i < c; ++i)
      clients.emplace_back([&] {
        for (int k = 0; k < o.rounds; ++k) {
          const OneResult r = one_request(o, next++);
          std::lock_guard<std::mutex> lock(mu);
          results.push_back(r);
        }
      });
    for (auto& t : clients) t.join();
    level.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    double ttft = 0, rate = 0;
    for (const OneResult& r : results) {
      ++level.requests;
      if (!r.ok) {
        ++level.failed;
        continue;
      }
      level.output_tokens += r.tokens;
      ttft += r.ttft;
      if (r.tokens > 1 && r.total > r.ttft) rate += static_cast<double>(r.tokens - 1) / (r.total - r.ttft);
    }
    const int ok = level.requests - level.failed;
    level.tokens_per_s = static_cast<double>(level.output_tokens) / level.wall_s;
    level.mean_ttft_s = ok ? ttft / ok : 0;
    level.mean_stream_tokens_per_s = ok ? rate / ok : 0;
    out.push_back(level);
  }
  return out;
}

}  // namespace k3::server
