// The HTTP side of `k3 serve` on cpp-httplib: routing, the API key, body limits, the error
// envelope for every status, SSE streaming, the chat page, and the serve loop's lifetime
// (background model load, signals, shutdown).
#include <httplib.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/listen_backlog.h"
#include "base/log.h"
#include "server/api_error.h"
#include "server/generation_job.h"
#include "server/generation_params.h"
#include "server/http_workers.h"
#include "server/peer_connection.h"
#include "server/server.h"
#include "server/web_assets.h"
#include "text/chat_output_parser.h"
#include "text/py_json.h"
#include "text/stream_decoder.h"

namespace k3::server {
namespace {

using Clock = std::chrono::steady_clock;

// Set by the SIGINT / SIGTERM handler on whichever thread takes the signal and read by the
// watcher thread: a lock-free atomic (a volatile sig_atomic_t is only safe within one thread;
// ThreadSanitizer reported the cross-thread read as a data race).
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler may only touch lock-free atomics");
extern "C" void on_signal(int sig) { g_signal.store(sig, std::memory_order_relaxed); }

void send_json(httplib::Response& res, int status, const ojson& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = "",
                const std::string& code = "") {
  send_json(res, status, error_envelope(status, message, param, code));
}

using Writer = std::function<bool(std::string_view)>;

bool needs_key(const std::string& path) {
  return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
}

// The API request ledger (metrics.h) of the request this HTTP worker thread is serving: httplib
// serves a request on one thread from its routing (the pre-routing handler) through its error
// handler to its log line, which ends the entry.  received: counted as received; settled: its
// outcome is counted, or left to its stream's end (the content provider's releaser).
struct LedgerEntry {
  bool received = false;
  bool settled = false;
};
thread_local LedgerEntry t_ledger;

// Whether an Authorization header carries `key` as a bearer token.  The scheme is
// case-insensitive (RFC 9110 11.1: "bearer KEY" was refused as an invalid key) and may be
// followed by several spaces; the key is compared in constant time.
bool bearer_matches(const std::string& auth, const std::string& key) {
  constexpr std::string_view kScheme = "bearer";
  if (auth.size() <= kScheme.size() || auth[kScheme.size()] != ' ') return false;
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(auth[i])) != kScheme[i]) return false;
  const size_t start = auth.find_first_not_of(' ', kScheme.size());
  if (start == std::string::npos || auth.size() - start != key.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(auth[start + i] ^ key[i]);
  return diff == 0;
}

std::string too_large_message(size_t limit) {
  return cat("the request body is larger than the limit of ", limit, " bytes");
}

// Worker threads the HTTP server may grow to by default: each open connection holds one.
constexpr size_t kMaxHttpThreads = 2048;

// Every connection is a file descriptor; the common soft limit of 1024 would stop accepting
// (httplib retries accept() every millisecond meanwhile) before the worker pool is used up.
// Raises the soft limit towards `wanted`, within the hard limit; quiet when it cannot.
void raise_open_file_limit(size_t wanted) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= wanted) return;
  const rlim_t target = rl.rlim_max == RLIM_INFINITY ? static_cast<rlim_t>(wanted) : std::min<rlim_t>(rl.rlim_max, wanted);
  if (target <= rl.rlim_cur) return;
  rl.rlim_cur = target;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) log_debug("cannot raise the open-file limit to ", target);
}

// The declared Content-Length: -1 when there is none, -2 when it is not a decimal byte count
// (httplib reads "-5" as 2^64 - 5 and waits for that many bytes, then answers 413).
int64_t declared_length(const httplib::Request& q) {
  if (!q.has_header("Content-Length")) return -1;
  const std::string v = q.get_header_value("Content-Length");
  if (v.empty() || !std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c); })) return -2;
  return v.size() > 18 ? std::numeric_limits<int64_t>::max() : std::stoll(v);
}

// Whether the request says where its body ends (Content-Length, or Transfer-Encoding: chunked).
// Without either, httplib's reader waits for the client to close the connection (or for the 30 s
// read timeout), which a client waiting for its answer never does.
bool declares_body(const httplib::Request& q) {
  return q.has_header("Content-Length") || q.has_header("Transfer-Encoding");
}

// Reads the body of a route registered in httplib's content-reader form (keep = false: reads past
// it without storing it, so the connection is ready for the next request).  The routes take that
// form because httplib's own read (a) parses a form-urlencoded body and refuses one over 8 KiB with
// a 413 (curl posts JSON with that Content-Type by default) and (b) checks its payload limit only
// against Content-Length, so a chunked body of any size would be read whole.  Here every byte
// counts.  Past `limit` the reading goes on, dropping the bytes, for up to another `limit`, so
// that a client still sending reads the 413 rather than a reset connection; a longer body is cut
// off there.  Throws ApiError: 411 no body declared, 413 over the limit, 415 multipart, 400 a body
// that cannot be read (a malformed chunk, a client that stopped sending).
std::string read_body(const httplib::Request& q, httplib::Response& r, const httplib::ContentReader& reader,
                      size_t limit, bool keep = true) {
  if (!declares_body(q))
    throw ApiError(411, "a request body is required (send it with Content-Length or chunked Transfer-Encoding)", "",
                   "length_required");
  // Answered before any byte of the body is read, closing the connection (what follows the
  // headers cannot be told apart from a next request): a Content-Length that is not a byte count,
  // and one past what the reading below would drain -- the client would otherwise hold a worker
  // until the read timeout, sending or not.
  const int64_t declared = declared_length(q);
  if (declared == -2) {
    r.set_header("Connection", "close");
    throw ApiError(400, cat("Content-Length '", q.get_header_value("Content-Length"), "' is not a byte count"), "",
                   "invalid_body");
  }
  if (declared > 0 && static_cast<uint64_t>(declared) > 2 * static_cast<uint64_t>(limit)) {
    r.set_header("Connection", "close");
    throw ApiError(413, too_large_message(limit), "", "request_too_large");
  }
  // httplib's reader parses multipart bodies itself (and needs its multipart form for them): the
  // raw bytes, and so JSON, are out of reach.
  const bool multipart = q.is_multipart_form_data();
  std::string text;
  size_t total = 0;
  const httplib::ContentReceiver receive = [&](const char* data, size_t n) {
    total += n;
    if (total <= limit) {
      if (keep && !multipart) text.append(data, n);
      return true;
    }
    if (!text.empty()) std::string().swap(text);
    return total - limit <= limit;
  };
  const bool ok = multipart ? reader([](const httplib::MultipartFormData&) { return true; }, receive) : reader(receive);
  // r.status 413: httplib's own check of a Content-Length over the limit.
  if (total > limit || r.status == 413) throw ApiError(413, too_large_message(limit), "", "request_too_large");
  // httplib decodes gzip, deflate and br, and passes any other Content-Encoding through as it is
  // (a zstd body was then parsed as JSON: "not valid JSON").
  std::string encoding = q.get_header_value("Content-Encoding");
  std::transform(encoding.begin(), encoding.end(), encoding.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (!encoding.empty() && encoding != "identity" && encoding != "gzip" && encoding != "deflate" && encoding != "br")
    throw ApiError(415, cat("Content-Encoding '", q.get_header_value("Content-Encoding"),
                            "' is not supported (send the body as gzip, deflate, br or unencoded)"),
                   "", "unsupported_media_type");
  if (!ok && !encoding.empty())
    throw ApiError(400, cat("the request body could not be decoded as Content-Encoding '", encoding, "'"), "",
                   "invalid_body");
  if (!ok)
    throw ApiError(400, "the request body could not be read (a malformed chunk, or the client stopped sending)", "",
                   "invalid_body");
  if (multipart)
    throw ApiError(415, "multipart/form-data bodies are not supported: send the request as JSON", "",
                   "unsupported_media_type");
  return text;
}

// For answers that ignore the body (405, 404): read past it, whatever it is.
void skip_body(const httplib::Request& q, httplib::Response& r, const httplib::ContentReader& reader, size_t limit) {
  try {
    read_body(q, r, reader, limit, /*keep=*/false);
  } catch (const ApiError&) {
  }
}

// One choice's stream(), which must not throw: httplib calls the content provider outside its
// handlers' try, so an exception would end the process.  An exception (a fault in the server; the
// engine's own failures arrive as results) ends the choice with an error event, as a failed
// generation does (and [DONE] when `whole`).  False when the stream did not finish: the client
// went away, or the error event could not be written.
bool stream_choice(GenerationJob& job, const Writer& write, bool whole) {
  std::string fault;
  try {
    return job.stream(write, whole);
  } catch (const std::exception& e) {
    fault = e.what();
  } catch (...) {
    fault = "unknown exception";
  }
  log_warn("streaming failed: ", fault);
  if (!write(cat("data: ", dump_json(error_envelope(500, cat("internal error: ", fault))), "\n\n"))) return false;
  return !whole || write("data: [DONE]\n\n");
}

class HttpServer {
 public:
  explicit HttpServer(const ServerOptions& o) : opt_(o), host_(o.engine) {}

  int run(const std::function<void(int)>& on_listening);

 private:
  void routes();
  // Runs an API handler: errors become envelopes, rejections are counted.
  void answer(httplib::Response& res, const std::function<void()>& f);
  // A GET route's handler under answer().
  httplib::Server::Handler api(std::function<void(const httplib::Request&, httplib::Response&)> f);
  // The same for a POST route, which gets the body read by read_body().
  using BodyHandler = std::function<void(const httplib::Request&, const std::string& body, httplib::Response&)>;
  httplib::Server::HandlerWithContentReader api_body(BodyHandler f);
  void require_ready() const;
  // The ledger (metrics.h): an API request's arrival, and its outcome from its status (499:
  // cancelled, >= 400: rejected, else completed), each counted once.
  void receive(const httplib::Request& q);
  void settle(const httplib::Request& q, int status);
  void generate(Endpoint endpoint, const httplib::Request& req, const std::string& text, httplib::Response& res);
  static bool stream_choices(const std::vector<std::shared_ptr<GenerationJob>>& jobs, bool usage,
                             httplib::DataSink& sink);
  static ojson combined_usage(const std::vector<std::shared_ptr<GenerationJob>>& jobs);
  void tokenize(const std::string& text, httplib::Response& res);
  void detokenize(const std::string& text, httplib::Response& res);
  ojson model_card() const;

  ServerOptions opt_;
  EngineHost host_;
  httplib::Server svr_;
  int64_t created_ = static_cast<int64_t>(std::time(nullptr));
};

void HttpServer::answer(httplib::Response& res, const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    send_error(res, e.status, e.what(), e.param, e.code);
  } catch (const Error& e) {
    send_error(res, 400, e.what());
  } catch (const std::bad_alloc&) {
    send_error(res, 500, "out of memory");
  } catch (const std::exception& e) {
    send_error(res, 500, cat("internal error: ", e.what()));
  }
}

void HttpServer::receive(const httplib::Request& q) {
  t_ledger = LedgerEntry{};
  if (!needs_key(q.path)) return;
  t_ledger.received = true;
  host_.metrics().count_received();
}

void HttpServer::settle(const httplib::Request& q, int status) {
  if (!needs_key(q.path) || t_ledger.settled) return;
  // A request httplib refused before routing (400 unparsable headers, 414) never reached the
  // pre-routing handler: it is received and rejected here.
  if (!t_ledger.received) {
    t_ledger.received = true;
    host_.metrics().count_received();
  }
  t_ledger.settled = true;
  if (status == 499)
    host_.metrics().count_cancelled();
  else if (status >= 400)
    host_.metrics().count_rejected(status);
  else
    host_.metrics().count_completed();
}

httplib::Server::Handler HttpServer::api(std::function<void(const httplib::Request&, httplib::Response&)> f) {
  return [this, f = std::move(f)](const httplib::Request& req, httplib::Response& res) {
    answer(res, [&] { f(req, res); });
    settle(req, res.status);
  };
}

httplib::Server::HandlerWithContentReader HttpServer::api_body(BodyHandler f) {
  return [this, f = std::move(f)](const httplib::Request& req, httplib::Response& res,
                                  const httplib::ContentReader& reader) {
    answer(res, [&] { f(req, read_body(req, res, reader, opt_.max_body_bytes), res); });
    settle(req, res.status);  // a stream was settled by generate(): its end counts it
  };
}

void HttpServer::require_ready() const {
  switch (host_.state()) {
    case EngineHost::State::kReady: return;
    case EngineHost::State::kLoading: throw ApiError(503, "the model is still loading; retry shortly", "", "loading");
    case EngineHost::State::kFailed: throw ApiError(503, cat("the model failed to load: ", host_.load_error()));
    case EngineHost::State::kStopping: throw ApiError(503, "the server is shutting down", "", "shutting_down");
  }
}

ojson HttpServer::model_card() const {
  return {{"id", opt_.engine.served_name},
          {"object", "model"},
          {"created", created_},
          {"owned_by", "k3"},
          {"root", opt_.engine.model_dir},
          {"max_model_len", host_.context_tokens()},
          {"context_length", host_.context_tokens()}};
}

void HttpServer::generate(Endpoint endpoint, const httplib::Request& req, const std::string& text,
                          httplib::Response& res) {
  const Clock::time_point arrival = Clock::now();
  const ojson body = parse_request_body(text);
  require_ready();
  check_model_field(body, opt_.engine.served_name);
  GenerationParams params = parse_generation_params(body, endpoint);
  PreparedPrompt prompt;
  ChatParserOptions popt;
  if (endpoint == Endpoint::kChat) {
    PreparedChat c = prepare_chat(host_, body, opt_.images);
    prompt = std::move(c.prompt);
    popt = c.parser;
    if (!c.forced_tools.empty() && (params.json_object || params.json_schema))
      throw ApiError(400, "response_format json_object / json_schema cannot be combined with tool_choice required or a "
                          "named function", "response_format");
    params.forced_tools = std::move(c.forced_tools);
    params.single_tool_call = c.single_call || !params.parallel_tool_calls;
  } else {
    prompt = prepare_completion(host_, body);
  }
  // n choices: one scheduler request each (choice i samples with seed + i); the scheduler
  // prefills their shared prompt once.  All are submitted before anything is answered, so a
  // refusal (429) comes as a status, not in the middle of a stream; the choices already queued
  // are then taken back (the request counts once, as rejected).
  std::vector<std::shared_ptr<GenerationJob>> jobs;
  try {
    for (int i = 0; i < params.n; ++i) {
      GenerationParams p = params;
      p.sampling.seed += static_cast<uint64_t>(i);
      jobs.push_back(std::make_shared<GenerationJob>(host_, endpoint, i + 1 < params.n ? prompt : std::move(prompt),
                                                     p, popt, arrival, i, i ? jobs.front().get() : nullptr));
    }
  } catch (...) {
    for (const auto& job : jobs) job->withdraw();
    throw;
  }
  if (!params.stream) {
    const std::optional<PeerConnection> peer =
        PeerConnection::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
    const std::function<bool()> gone = peer ? std::function<bool()>([&] { return peer->hung_up(); }) : nullptr;
    ojson body;
    for (const auto& job : jobs) {
      std::optional<ojson> reply = job->run(gone);
      if (!reply) {
        res.status = 499;  // nginx's "client closed request"; nobody is left to read it
        return;
      }
      if (body.is_null())
        body = std::move(*reply);
      else
        body["choices"].push_back((*reply)["choices"][0]);
    }
    if (jobs.size() > 1) body["usage"] = combined_usage(jobs);
    send_json(res, 200, body);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  // The request is settled when its response is destroyed (httplib calls the releaser then, with
  // whether the provider finished): completed after [DONE], cancelled when the stream broke off.
  ServerMetrics* metrics = &host_.metrics();
  res.set_chunked_content_provider(
      "text/event-stream",
      [jobs, usage = params.include_usage](size_t, httplib::DataSink& sink) {
        // Nothing may leave the provider (httplib calls it outside its handlers' try): what
        // stream_choice() cannot turn into an error event just ends the connection.
        try {
          return stream_choices(jobs, usage, sink);
        } catch (...) {
          return false;
        }
      },
      [metrics](bool finished) { finished ? metrics->count_completed() : metrics->count_cancelled(); });
  t_ledger.settled = true;  // by the releaser, not by the handler's status
}

// The SSE body of a streaming request; false when it did not finish (the connection then ends).
bool HttpServer::stream_choices(const std::vector<std::shared_ptr<GenerationJob>>& jobs, bool usage,
                                httplib::DataSink& sink) {
  if (jobs.size() == 1) {
    const bool ok = stream_choice(*jobs[0], [&](std::string_view s) { return sink.write(s.data(), s.size()); }, true);
    if (ok) sink.done();
    return ok;
  }
  // One thread per further choice; whole events go out one at a time.
  std::mutex mu;
  std::atomic<bool> abandoned{false};
  const Writer write = [&](std::string_view s) {
    if (abandoned.load()) return false;
    std::lock_guard<std::mutex> lock(mu);
    return sink.write(s.data(), s.size());
  };
  std::vector<char> ok(jobs.size(), 0);
  std::vector<std::thread> others;
  try {
    others.reserve(jobs.size() - 1);
    for (size_t i = 1; i < jobs.size(); ++i)
      others.emplace_back([&, i] {
        try {
          ok[i] = stream_choice(*jobs[i], write, false);
        } catch (...) {  // nothing may leave a thread; the stream just ends
        }
      });
  } catch (const std::exception& e) {
    // A thread that cannot start (a thread limit): destroying the started ones while they run
    // would call std::terminate, so their next write fails and they end; the client then reads
    // an error event, as for a failed generation.
    log_warn("cannot stream ", jobs.size(), " choices: ", e.what());
    abandoned = true;
    for (std::thread& t : others) t.join();
    const std::string event =
        cat("data: ", dump_json(error_envelope(500, cat("cannot stream ", jobs.size(), " choices: ", e.what()))),
            "\n\ndata: [DONE]\n\n");
    if (sink.write(event.data(), event.size())) sink.done();
    return false;
  }
  try {
    ok[0] = stream_choice(*jobs[0], write, false);
  } catch (...) {
  }
  for (std::thread& t : others) t.join();
  if (std::find(ok.begin(), ok.end(), 0) != ok.end()) return false;
  if (usage && !jobs[0]->write_usage_chunk(write, combined_usage(jobs))) return false;
  if (!write("data: [DONE]\n\n")) return false;
  sink.done();
  return true;
}

// The usage of n choices: the prompt once (with its cached part), the completions summed.
ojson HttpServer::combined_usage(const std::vector<std::shared_ptr<GenerationJob>>& jobs) {
  ojson u = jobs.front()->final_usage();
  if (!u.is_object()) return u;
  int64_t completion = 0, reasoning = 0;
  for (const auto& j : jobs) {
    const ojson& x = j->final_usage();
    if (!x.is_object()) continue;
    completion += x["completion_tokens"].get<int64_t>();
    if (x.contains("completion_tokens_details")) reasoning += x["completion_tokens_details"]["reasoning_tokens"].get<int64_t>();
  }
  u["completion_tokens"] = completion;
  u["total_tokens"] = u["prompt_tokens"].get<int64_t>() + completion;
  if (u.contains("completion_tokens_details")) u["completion_tokens_details"]["reasoning_tokens"] = reasoning;
  return u;
}

void HttpServer::tokenize(const std::string& text, httplib::Response& res) {
  const ojson body = parse_request_body(text);
  require_ready();
  check_model_field(body, opt_.engine.served_name);
  PreparedPrompt p;
  if (body.contains("messages") && body.contains("prompt"))
    throw ApiError(400, "give either prompt (text or ids) or messages (the chat format), not both", "prompt");
  if (body.contains("messages")) {
    p = prepare_chat(host_, body, opt_.images, /*check_fit=*/false).prompt;
  } else if (body.contains("prompt")) {
    p = prepare_completion(host_, body, /*check_fit=*/false);
  } else {
    throw ApiError(400, "give either prompt (text or ids) or messages (the chat format)", "prompt");
  }
  ojson out = ojson::object();
  out["tokens"] = p.tokens;
  out["count"] = p.tokens.size();
  out["max_model_len"] = host_.context_tokens();
  send_json(res, 200, out);
}

void HttpServer::detokenize(const std::string& text, httplib::Response& res) {
  const ojson body = parse_request_body(text);
  require_ready();
  check_model_field(body, opt_.engine.served_name);
  if (!body.contains("tokens") || !body["tokens"].is_array())
    throw ApiError(400, "tokens must be a list of token ids", "tokens");
  std::vector<int32_t> ids;
  const int64_t vocab = host_.tokenizer().vocab_size();
  for (const ojson& t : body["tokens"]) {
    if (!t.is_number_integer()) throw ApiError(400, "tokens must be a list of token ids (integers)", "tokens");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= vocab)
      throw ApiError(400, cat("tokens: id ", id, " is outside the vocabulary [0, ", vocab, ")"), "tokens");
    ids.push_back(static_cast<int32_t>(id));
  }
  ojson out = ojson::object();
  out["prompt"] = host_.tokenizer().decode(ids);
  // With chat_format: the ids read as an assistant reply after the generation prompt, split by the
  // output parser into reasoning / content / tool calls (as a chat completion would return them).
  if (get_bool(body, "chat_format").value_or(false)) {
    ChatParserOptions po;
    po.thinking = get_bool(body, "thinking").value_or(true);
    po.parse_tools = true;
    ChatOutputParser parser(po, &host_.tokenizer());
    for (int32_t id : ids) parser.feed_token(id);
    out["message"] = parser.finish().to_openai();
  }
  send_json(res, 200, out);
}

void HttpServer::routes() {
  const std::string served = opt_.engine.served_name;
  // Every route of a method with a body (POST, PUT, PATCH, DELETE) is in httplib's content-reader
  // form: the handler reads the body itself (read_body(), skip_body()).
  svr_.Post("/v1/chat/completions",
            api_body([this](const auto& q, const auto& t, auto& r) { generate(Endpoint::kChat, q, t, r); }));
  svr_.Post("/v1/completions",
            api_body([this](const auto& q, const auto& t, auto& r) { generate(Endpoint::kCompletion, q, t, r); }));
  svr_.Post("/tokenize", api_body([this](const auto&, const auto& t, auto& r) { tokenize(t, r); }));
  svr_.Post("/detokenize", api_body([this](const auto&, const auto& t, auto& r) { detokenize(t, r); }));
  svr_.Get("/v1/models", api([this](const auto&, auto& r) {
    require_ready();
    send_json(r, 200, {{"object", "list"}, {"data", ojson::array({model_card()})}});
  }));
  svr_.Get(R"(/v1/models/(.+))", api([this](const httplib::Request& q, httplib::Response& r) {
    require_ready();
    if (q.matches[1] != opt_.engine.served_name)
      throw ApiError(404, cat("the model '", q.matches[1].str(), "' does not exist"), "model", "model_not_found");
    send_json(r, 200, model_card());
  }));
  svr_.Get("/health", [this](const httplib::Request&, httplib::Response& r) {
    if (host_.ready()) {
      send_json(r, 200, {{"status", "ok"}});
    } else if (host_.state() == EngineHost::State::kLoading) {
      send_error(r, 503, "the model is loading", "", "loading");
    } else {
      send_error(r, 503, "the engine is not running", "", "unavailable");
    }
  });
  svr_.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
    std::shared_ptr<Scheduler> s = host_.ready() ? host_.scheduler() : nullptr;
    const SchedulerStats stats = s ? s->stats() : SchedulerStats{};
    // The budget the scheduler admits within: --state-budget, or what --memory-budget leaves.
    const uint64_t budget = s ? s->options().memory_budget : opt_.engine.scheduler.memory_budget;
    r.set_content(host_.metrics().render(s ? &stats : nullptr, budget),
                  "text/plain; version=0.0.4; charset=utf-8");
  });
  for (const char* path : {"/", "/index.html", "/app.js", "/style.css", "/favicon.svg", "/favicon.ico"}) {
    svr_.Get(path, [](const httplib::Request& q, httplib::Response& r) {
      const WebAsset* a = find_web_asset(q.path);
      r.set_content(std::string(a->data), std::string(a->mime).c_str());
      r.set_header("Cache-Control", "no-cache");
    });
  }
  // A known path with the wrong method: 405 with the methods it allows (the body, if any, is read
  // past; none is needed).
  const auto wrong_method = [](const char* allow) {
    return [allow](const httplib::Request& q, httplib::Response& r) {
      r.set_header("Allow", allow);
      send_error(r, 405, cat("method ", q.method, " is not allowed on ", q.path, " (use ", allow, ")"), "",
                 "method_not_allowed");
    };
  };
  const size_t limit = opt_.max_body_bytes;
  const auto wrong_method_with_body = [&](const char* allow) {
    return [limit, f = wrong_method(allow)](const httplib::Request& q, httplib::Response& r,
                                            const httplib::ContentReader& reader) {
      skip_body(q, r, reader, limit);
      f(q, r);
    };
  };
  // OPTIONS on a known path: 204 with the methods it allows (it was "404 no route" for paths that
  // exist).
  const auto options = [](const char* allow) {
    return [allow](const httplib::Request&, httplib::Response& r) {
      r.set_header("Allow", allow);
      r.status = 204;
    };
  };
  for (const char* path : {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"}) {
    svr_.Get(path, wrong_method("POST"));
    svr_.Put(path, wrong_method_with_body("POST"));
    svr_.Patch(path, wrong_method_with_body("POST"));
    svr_.Delete(path, wrong_method_with_body("POST"));
    svr_.Options(path, options("POST, OPTIONS"));
  }
  for (const char* path : {"/v1/models", R"(/v1/models/(.+))", "/health", "/metrics", "/", "/index.html", "/app.js",
                           "/style.css", "/favicon.svg", "/favicon.ico"})
    svr_.Options(path, options("GET, HEAD, OPTIONS"));
  for (const char* path : {"/v1/models", "/health", "/metrics", "/"}) {
    svr_.Post(path, wrong_method_with_body("GET"));
    svr_.Put(path, wrong_method_with_body("GET"));
    svr_.Patch(path, wrong_method_with_body("GET"));
    svr_.Delete(path, wrong_method_with_body("GET"));
  }
  // Any other path with a body method: 404 (written by the error handler) once past the body.
  // Registered last, as httplib tries content-reader routes in order.
  const auto no_route = [limit](const httplib::Request& q, httplib::Response& r, const httplib::ContentReader& reader) {
    skip_body(q, r, reader, limit);
    r.status = 404;
  };
  svr_.Post(".*", no_route);
  svr_.Put(".*", no_route);
  svr_.Patch(".*", no_route);
  svr_.Delete(".*", no_route);
  // Statuses httplib sets itself (404 unknown path, 400 unparsable request, 414 request line too
  // long) get the envelope too.
  svr_.set_error_handler([this](const httplib::Request& q, httplib::Response& r) {
    // 499: a non-streamed request whose client hung up; nobody reads an answer (the ledger counted
    // it as cancelled).
    if (r.status == 499) return;
    // Every error answer to an API path settles it as rejected (a no-op for those answer() and
    // the handlers settled already): 405 and 404 too.
    settle(q, r.status);
    if (!r.body.empty()) return;
    std::string msg, code;
    switch (r.status) {
      case 404: msg = cat("no route for ", q.method, " ", q.path); code = "not_found"; break;
      case 413: msg = too_large_message(opt_.max_body_bytes); code = "request_too_large"; break;
      case 400:
        msg = "the request is not valid HTTP/1.1 (request line or headers) or uses an unsupported method";
        code = "bad_request";
        break;
      case 414: msg = "the request line is too long"; code = "uri_too_long"; break;
      default: msg = cat("HTTP ", r.status); break;
    }
    send_error(r, r.status, msg, "", code);
  });
  svr_.set_exception_handler([](const httplib::Request&, httplib::Response& r, std::exception_ptr ep) {
    std::string what = "unknown";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(r, 500, cat("internal error: ", what));
  });
  svr_.set_pre_routing_handler([this](const httplib::Request& q, httplib::Response& r) {
    receive(q);
    if (opt_.api_key.empty() || !needs_key(q.path)) return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = q.get_header_value("Authorization");
    if (bearer_matches(auth, opt_.api_key)) return httplib::Server::HandlerResponse::Unhandled;
    r.set_header("WWW-Authenticate", "Bearer");
    send_error(r, 401, auth.empty() ? "missing API key: send Authorization: Bearer <key>" : "invalid API key", "",
               "invalid_api_key");
    settle(q, 401);
    return httplib::Server::HandlerResponse::Handled;
  });
  // The log line ends the request on this thread: one the routes left unsettled (OPTIONS: 204) is
  // settled by its status, and the ledger entry is cleared for the connection's next request.
  svr_.set_logger([this](const httplib::Request& q, const httplib::Response& r) {
    if (t_ledger.received && !t_ledger.settled) settle(q, r.status);
    t_ledger = LedgerEntry{};
    log_info(q.method, " ", q.path, " -> ", r.status);
  });
}

int HttpServer::run(const std::function<void(int)>& on_listening) {
  const SchedulerOptions& so = opt_.engine.scheduler;
  // One worker per slot and waiting request, and a few for /health, /metrics and the page; more
  // start while every worker is held (slow or idle clients, see http_workers.h).
  const size_t threads = opt_.http_threads > 0 ? static_cast<size_t>(opt_.http_threads)
                                               : static_cast<size_t>(so.max_batch) + so.max_queue + 16;
  const size_t max_threads = opt_.http_threads > 0 ? threads : std::max<size_t>(threads, kMaxHttpThreads);
  svr_.new_task_queue = [threads, max_threads] { return new HttpWorkers(threads, max_threads); };
  raise_open_file_limit(max_threads + 64);
  svr_.set_payload_max_length(opt_.max_body_bytes);
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which would let a second server
  // silently share a port that is already in use.
  svr_.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof yes);
  });
  // A client that asks before sending (Expect: 100-continue; curl does for bodies over 1 MiB)
  // hears at once that a declared body is too large or not a byte count, and sends nothing.
  svr_.set_expect_100_continue_handler([this](const httplib::Request& q, httplib::Response& r) {
    const int64_t declared = declared_length(q);
    if (declared == -2) {
      send_error(r, 400, cat("Content-Length '", q.get_header_value("Content-Length"), "' is not a byte count"), "",
                 "invalid_body");
      return 400;
    }
    if (declared > 0 && static_cast<uint64_t>(declared) > opt_.max_body_bytes) {
      send_error(r, 413, too_large_message(opt_.max_body_bytes), "", "request_too_large");
      return 413;
    }
    return 100;
  });
  svr_.set_keep_alive_timeout(5);
  svr_.set_read_timeout(30);
  svr_.set_write_timeout(30);
  routes();

  int port = opt_.port;
  if (port == 0) {
    port = svr_.bind_to_any_port(opt_.host);
    K3_CHECK(port > 0, "cannot listen on ", opt_.host, " (any port)");
  } else {
    K3_CHECK(svr_.bind_to_port(opt_.host, port), "cannot listen on ", opt_.host, ":", port,
             " (is the port in use, or the address not local?)");
  }
  deepen_listen_backlog(port);
  if (on_listening) on_listening(port);

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  // A second Ctrl-C / SIGTERM takes the default action: it ends a server whose stop waits on a
  // model load stuck in I/O.
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  std::thread loader([this] {
    try {
      host_.load();
      log_info("engine ready: ", opt_.engine.served_name);
    } catch (const std::exception& e) {
      // run() reports it once the server stopped.
    }
  });
  std::atomic<bool> listening_done{false};
  std::thread watcher([&] {
    while (!listening_done.load()) {
      if (g_signal.load(std::memory_order_relaxed) != 0 || host_.state() == EngineHost::State::kFailed) {
        host_.shutdown();
        svr_.stop();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  // listen throws when not one HTTP worker thread starts (HttpWorkers): the loader and the
  // watcher must still be joined (a joinable std::thread destroyed by the unwinding would call
  // std::terminate).  The error is said at once, and the engine stops, before waiting on a load.
  std::string listen_error;
  try {
    svr_.listen_after_bind();
  } catch (const std::exception& e) {
    listen_error = e.what();
    log_warn("cannot serve on ", opt_.host, ":", port, ": ", listen_error, "; stopping");
    host_.shutdown();
  }
  listening_done = true;
  watcher.join();
  loader.join();
  host_.shutdown();
  if (!listen_error.empty()) fail("cannot serve on ", opt_.host, ":", port, ": ", listen_error);
  if (host_.state() == EngineHost::State::kFailed) fail("cannot serve ", opt_.engine.model_dir, ": ", host_.load_error());
  return 0;
}

}  // namespace

int run_server(const ServerOptions& options, const std::function<void(int)>& on_listening) {
  HttpServer server(options);
  return server.run(on_listening);
}

}  // namespace k3::server
