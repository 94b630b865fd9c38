#include "server/load_test.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "base/error.h"
#include "text/py_json.h"

namespace k3::server {
namespace {

using Clock = std::chrono::steady_clock;

#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
constexpr const char* kUrlShape = "http://HOST[:PORT] or https://HOST[:PORT]";
#else
constexpr const char* kUrlShape = "http://HOST[:PORT]";
#endif

// Parsed here rather than by httplib::Client(url): that constructor throws std::invalid_argument
// for an unknown scheme (an "internal error" to the CLI) and quietly turns anything else it cannot
// parse (no scheme, a bad port, an unclosed '[') into a host name that then just fails to connect.
}  // namespace

LoadTarget parse_load_target(const std::string& url) {
  const auto bad = [&url](const std::string& why) {
    fail("the server URL '", url, "' is not valid: ", why, " (expected ", kUrlShape, ")");
  };
  const size_t sep = url.find("://");
  if (sep == std::string::npos) bad("it has no scheme");
  std::string scheme = url.substr(0, sep);
  for (char& ch : scheme) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  LoadTarget e;
  if (scheme == "https") {
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
    e.https = true;
#else
    bad("https is not supported by this build's HTTP library");
#endif
  } else if (scheme != "http") {
    bad(cat("the scheme '", scheme, "' is not supported"));
  }
  std::string rest = url.substr(sep + 3);
  // The requests go to fixed paths (/health, /v1/completions), so only a bare trailing '/' is
  // accepted: silently dropping a longer path would measure some other endpoint.
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find_first_of("/?#") != std::string::npos) bad("a path is not supported; give the server's base URL");
  if (rest.find('@') != std::string::npos) bad("user info (user@host) is not supported; use --api-key");
  std::string port_text;
  bool has_port = false;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos) bad("the IPv6 address has no closing ']'");
    e.host = rest.substr(1, close - 1);
    if (e.host.empty() || e.host.find(':') == std::string::npos ||
        e.host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string::npos)
      bad(cat("'[", e.host, "]' is not an IPv6 address"));
    const std::string after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') bad(cat("unexpected '", after, "' after the IPv6 address"));
      has_port = true;
      port_text = after.substr(1);
    }
  } else {
    const size_t colon = rest.find(':');
    e.host = rest.substr(0, colon);
    if (colon != std::string::npos) {
      has_port = true;
      port_text = rest.substr(colon + 1);
      if (port_text.find(':') != std::string::npos)
        bad("more than one ':'; write an IPv6 address in brackets, e.g. http://[::1]:8000");
    }
    if (e.host.empty()) bad("the host is empty");
    for (char ch : e.host)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '.' && ch != '_')
        bad(cat("the host '", e.host, "' contains '", ch, "'"));
  }
  if (!has_port) {
    e.port = e.https ? 443 : 80;
  } else {
    if (port_text.empty() || port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos)
      bad(cat("the port '", port_text, "' is not a number from 1 to 65535"));
    e.port = std::stoi(port_text);  // at most 5 digits: cannot overflow
    if (e.port < 1 || e.port > 65535) bad(cat("the port ", e.port, " is not from 1 to 65535"));
  }
  return e;
}

std::unique_ptr<httplib::ClientImpl> make_load_client(const LoadTarget& e) {
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
  if (e.https) return std::make_unique<httplib::SSLClient>(e.host, e.port);
#endif
  return std::make_unique<httplib::ClientImpl>(e.host, e.port);
}

httplib::Headers bearer_auth(const std::string& api_key) {
  httplib::Headers h;
  if (!api_key.empty()) h.emplace("Authorization", "Bearer " + api_key);
  return h;
}

namespace {

// The OpenAI envelope's error.message (or a string `error`), else the start of the body, on one
// line; "" for an empty body.
std::string error_detail(const std::string& body) {
  std::string detail;
  const ojson j = ojson::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const ojson& err = j["error"];
    if (err.is_object() && err.contains("message") && err["message"].is_string())
      detail = err["message"].get<std::string>();
    else if (err.is_string())
      detail = err.get<std::string>();
  }
  if (detail.empty()) detail = body.substr(0, 200);
  for (char& ch : detail)
    if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
  while (!detail.empty() && detail.back() == ' ') detail.pop_back();
  return detail;
}

}  // namespace

std::string describe_http_failure(int status, const std::string& body) {
  const std::string detail = error_detail(body);
  return detail.empty() ? cat("HTTP ", status) : cat("HTTP ", status, ": ", detail);
}

namespace {

std::string describe_no_answer(httplib::Error err) {
  return cat("no answer (httplib error: ", httplib::to_string(err), ")");
}

struct OneResult {
  bool ok = false;
  long long tokens = 0;
  double ttft = 0, total = 0;
  std::string error;  // why !ok
};

OneResult one_request(const LoadTestOptions& o, const LoadTarget& ep, int index) {
  const std::unique_ptr<httplib::ClientImpl> cli = make_load_client(ep);
  cli->set_connection_timeout(30);
  cli->set_read_timeout(600);
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
  req.headers = bearer_auth(o.api_key);
  req.set_header("Content-Type", "application/json");
  OneResult r;
  int status = 0;
  std::string buf;         // undelivered part of the event stream
  std::string error_body;  // start of a non-200 body, for the failure reason
  bool saw_usage = false;
  std::string stream_problem;  // the first thing wrong inside a 200 stream
  const Clock::time_point t0 = Clock::now();
  bool first = true;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  // Every field of the server's JSON is checked before it is read: a missing or mistyped one
  // (a server whose usage lacks completion_tokens) makes this request fail with that reason.
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      if (error_body.size() < 4096) error_body.append(data, std::min<size_t>(n, 4096 - error_body.size()));
      return true;
    }
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
      if (!j.is_object()) continue;
      if (j.contains("error") && stream_problem.empty())
        stream_problem = cat("the stream reported an error: ", error_detail(ev.substr(6)));
      if (!j.contains("usage") || !j["usage"].is_object()) continue;
      saw_usage = true;
      const ojson& usage = j["usage"];
      if (usage.contains("completion_tokens") && usage["completion_tokens"].is_number_integer())
        r.tokens = usage["completion_tokens"].get<long long>();
      else if (stream_problem.empty())
        stream_problem = "the stream's usage chunk has no integer completion_tokens";
    }
    return true;
  };
  const httplib::Result res = cli->send(req);
  r.total = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!res)
    r.error = describe_no_answer(res.error());
  else if (res->status != 200)
    r.error = describe_http_failure(res->status, error_body);
  else if (!stream_problem.empty())
    r.error = stream_problem;
  else if (!saw_usage)
    r.error = "the stream had no usage chunk (completion_tokens)";
  else if (r.tokens <= 0)
    r.error = cat("the stream's usage reports completion_tokens = ", r.tokens);
  r.ok = r.error.empty();
  return r;
}

// A client thread's request; whatever goes wrong becomes a failed result, never an exception
// escaping the thread (that would std::terminate the whole process).
OneResult guarded_request(const LoadTestOptions& o, const LoadTarget& ep, int index) {
  try {
    return one_request(o, ep, index);
  } catch (const std::exception& e) {
    OneResult r;
    r.error = cat("client error: ", e.what());
    return r;
  }
}

void validate(const LoadTestOptions& o) {
  K3_CHECK(!o.concurrency.empty(), "no concurrency levels given");
  // All levels are checked before the first one runs, so a typo in the last level does not
  // throw away the results of the levels before it.
  for (int c : o.concurrency)
    K3_CHECK(c >= 1 && c <= kMaxLoadTestConcurrency, "concurrency ", c, " is out of range (1 to ",
             kMaxLoadTestConcurrency, ")");
  K3_CHECK(o.rounds >= 1, "rounds must be >= 1 (got ", o.rounds, ")");
  K3_CHECK(o.max_tokens >= 1, "max_tokens must be >= 1 (got ", o.max_tokens, ")");
}

}  // namespace

std::vector<LoadTestLevel> run_load_test(const LoadTestOptions& o) {
  const LoadTarget ep = parse_load_target(o.url);
  validate(o);
  {
    const std::unique_ptr<httplib::ClientImpl> cli = make_load_client(ep);
    // httplib waits 300 s for a connection by default: too long for a "is it up" probe.
    cli->set_connection_timeout(10);
    cli->set_read_timeout(60);
    const httplib::Result h = cli->Get("/health", bearer_auth(o.api_key));
    K3_CHECK(h, "cannot reach the server at ", o.url, ": ", describe_no_answer(h.error()));
    K3_CHECK(h->status == 200, "the server at ", o.url, " is not healthy: ", describe_http_failure(h->status, h->body));
  }
  std::vector<LoadTestLevel> out;
  for (int c : o.concurrency) {
    LoadTestLevel level;
    level.concurrency = c;
    std::mutex mu;
    std::vector<OneResult> results;
    std::atomic<int> lost{0};  // results that could not be stored (out of memory): still failures
    std::atomic<int> next{0};
    // Every client waits here until all are started, so a level whose threads cannot all be
    // created sends no request at all, and the wall time starts when the load really does.
    enum : int { kWait = 0, kGo = 1, kAbort = 2 };
    std::atomic<int> gate{kWait};
    const auto client = [&] {
      gate.wait(kWait);
      if (gate.load() != kGo) return;
      for (int k = 0; k < o.rounds; ++k) {
        try {
          OneResult r = guarded_request(o, ep, next++);
          std::lock_guard<std::mutex> lock(mu);
          results.push_back(std::move(r));
        } catch (...) {
          ++lost;
        }
      }
    };
    std::vector<std::thread> clients;
    try {
      clients.reserve(static_cast<size_t>(c));
      for (int i = 0; i < c; ++i) clients.emplace_back(client);
    } catch (const std::exception& e) {
      // Destroying a joinable std::thread calls std::terminate: release and join the started ones.
      gate.store(kAbort);
      gate.notify_all();
      for (std::thread& t : clients) t.join();
      fail("cannot start ", c, " client threads (concurrency ", c, "): ", e.what());
    }
    const Clock::time_point t0 = Clock::now();
    gate.store(kGo);
    gate.notify_all();
    for (std::thread& t : clients) t.join();
    level.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    double ttft = 0, rate = 0;
    for (const OneResult& r : results) {  // in completion order: the first failure comes first
      ++level.requests;
      if (!r.ok) {
        ++level.failed;
        if (level.first_error.empty()) level.first_error = r.error;
        continue;
      }
      level.output_tokens += r.tokens;
      ttft += r.ttft;
      if (r.tokens > 1 && r.total > r.ttft) rate += static_cast<double>(r.tokens - 1) / (r.total - r.ttft);
    }
    level.requests += lost.load();
    level.failed += lost.load();
    if (lost.load() > 0 && level.first_error.empty()) level.first_error = "client error: a result could not be stored";
    const int ok = level.requests - level.failed;
    level.tokens_per_s = level.wall_s > 0 ? static_cast<double>(level.output_tokens) / level.wall_s : 0;
    level.mean_ttft_s = ok ? ttft / ok : 0;
    level.mean_stream_tokens_per_s = ok ? rate / ok : 0;
    out.push_back(std::move(level));
  }
  return out;
}

}  // namespace k3::server
