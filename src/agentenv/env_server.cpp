// The HTTP side of `k3 env serve` on cpp-httplib: routing, the API key, request bodies and their
// validation, the error envelope, streamed command output, metrics, and stopping.
#include "agentenv/env_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include "base/listen_backlog.h"
#include "base/log.h"

namespace k3::agentenv {
namespace {

using json = nlohmann::json;

// A failure with its own status (401, 411, 413, 415, 503); the others come from the exception's
// type (srv_status_of).
class SrvHttpError : public Error {
 public:
  SrvHttpError(int status, const std::string& message) : Error(message), status(status) {}
  int status;
};

// Set by the SIGINT / SIGTERM handler and read by listen()'s watcher thread: a lock-free atomic,
// the only kind a signal handler may touch.
std::atomic<int> srv_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler may only touch lock-free atomics");
extern "C" void srv_on_signal(int sig) { srv_signal.store(sig, std::memory_order_relaxed); }

constexpr double kSrvMaxTtlSeconds = 30 * 86400;
constexpr double kSrvMaxCommandSeconds = 86400;
constexpr int kSrvMaxForks = 16;
constexpr int kSrvMaxJsonDepth = 32;
// Idle keep-alive connections hold a worker this long; stopping waits for them as well.
constexpr time_t kSrvKeepAliveSeconds = 5;

// Command output and file names need not be UTF-8: invalid bytes become U+FFFD instead of the
// dump throwing.
std::string srv_dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void srv_send_json(httplib::Response& r, int status, const json& body) {
  r.status = status;
  r.set_content(srv_dump(body), "application/json");
}

void srv_send_error(httplib::Response& r, int status, const std::string& message) {
  srv_send_json(r, status, json{{"code", status}, {"message", message}});
}

// The status and message for the exception being handled (called inside a catch block).
int srv_status_of(std::string& message) {
  try {
    throw;
  } catch (const SrvHttpError& e) {
    message = e.what();
    return e.status;
  } catch (const NotFound& e) {
    message = e.what();
    return 404;
  } catch (const Conflict& e) {
    message = e.what();
    return 409;
  } catch (const Error& e) {
    message = e.what();
    return 400;
  } catch (const std::bad_alloc&) {
    message = "out of memory";
  } catch (const std::exception& e) {
    message = cat("internal error: ", e.what());
  } catch (...) {
    message = "internal error: unknown exception";
  }
  return 500;
}

// Runs a route's handler: exceptions become error envelopes.
void srv_answer(httplib::Response& r, const std::function<void()>& f) {
  try {
    f();
  } catch (...) {
    std::string message;
    const int status = srv_status_of(message);
    srv_send_error(r, status, message);
  }
}

// Compares in time that depends on the given key's length only.
bool srv_same_key(std::string_view given, std::string_view key) {
  if (key.empty()) return false;
  unsigned char diff = given.size() != key.size() ? 1 : 0;
  for (size_t i = 0; i < given.size(); ++i)
    diff |= static_cast<unsigned char>(given[i] ^ key[i % key.size()]);
  return diff == 0;
}

std::string srv_too_large(size_t limit) {
  return cat("the request body is larger than the limit of ", limit, " bytes");
}

// The declared Content-Length: -1 when there is none, -2 when it is not a decimal byte count.
int64_t srv_declared_length(const httplib::Request& q) {
  if (!q.has_header("Content-Length")) return -1;
  const std::string v = q.get_header_value("Content-Length");
  if (v.empty() || !std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c); })) return -2;
  return v.size() > 18 ? std::numeric_limits<int64_t>::max() : std::stoll(v);
}

bool srv_declares_body(const httplib::Request& q) {
  return q.has_header("Content-Length") || q.has_header("Transfer-Encoding");
}

// The request body, read through httplib's content reader: the routes take that form so that
// every byte counts against the limit (a chunked body too, which httplib's own read takes whole)
// and a form-urlencoded Content-Type (curl's default) is not parsed as a form.  No declared body
// reads as empty (httplib would wait for the client to close).  Past the limit the reading goes
// on, dropping the bytes, for up to another limit, so that a client still sending reads the 413
// rather than a reset connection.
std::string srv_read_body(const httplib::Request& q, httplib::Response& r, const httplib::ContentReader& reader,
                          size_t limit, bool keep = true) {
  if (!srv_declares_body(q)) return "";
  const int64_t declared = srv_declared_length(q);
  if (declared == -2) {
    r.set_header("Connection", "close");
    throw SrvHttpError(400, cat("Content-Length '", q.get_header_value("Content-Length"), "' is not a byte count"));
  }
  if (declared > 0 && static_cast<uint64_t>(declared) > 2 * static_cast<uint64_t>(limit)) {
    r.set_header("Connection", "close");
    throw SrvHttpError(413, srv_too_large(limit));
  }
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
  if (total > limit || r.status == 413) throw SrvHttpError(413, srv_too_large(limit));
  // httplib decodes gzip, deflate and br, and passes any other Content-Encoding through as it is.
  std::string encoding = q.get_header_value("Content-Encoding");
  std::transform(encoding.begin(), encoding.end(), encoding.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (!encoding.empty() && encoding != "identity" && encoding != "gzip" && encoding != "deflate" && encoding != "br")
    throw SrvHttpError(415, cat("Content-Encoding '", q.get_header_value("Content-Encoding"),
                                "' is not supported (send gzip, deflate, br or unencoded)"));
  if (!ok) throw SrvHttpError(400, "the request body could not be read (a malformed chunk, or the client stopped sending)");
  if (multipart)
    throw SrvHttpError(415, "multipart/form-data bodies are not supported: send JSON, or a file's bytes as they are");
  return text;
}

// Whether JSON text nests arrays or objects deeper than `depth` (brackets in strings aside):
// checked before parsing, since such values are taken apart and dumped recursively.
bool srv_nests_deeper_than(std::string_view text, int depth) {
  int level = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++level > depth) return true;
    } else if (c == ']' || c == '}') {
      --level;
    }
  }
  return false;
}

// A request body as a JSON object; empty is {}.
json srv_parse_object(std::string_view text) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return json::object();
  K3_CHECK(!srv_nests_deeper_than(text, kSrvMaxJsonDepth), "the request body nests arrays or objects more than ",
           kSrvMaxJsonDepth, " levels deep");
  json body;
  try {
    body = json::parse(text);
  } catch (const json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 7: ...": the position stays.
    std::string what = e.what();
    const size_t tag = what.find("] ");
    if (what.rfind("[json.exception", 0) == 0 && tag != std::string::npos) what.erase(0, tag + 2);
    fail("the request body is not valid JSON: ", what);
  }
  K3_CHECK(body.is_object(), "the request body must be a JSON object (got ", body.type_name(), ")");
  return body;
}

// A value for an error message, cut short.
std::string srv_show(const json& v) {
  std::string s = srv_dump(v);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

std::string srv_show_name(const std::string& name) {
  return srv_show(json(name.size() > 60 ? name.substr(0, 57) + "..." : name));
}

// Refuses a member not in `known`.
void srv_only_fields(const json& body, std::initializer_list<const char*> known) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (std::any_of(known.begin(), known.end(), [&](const char* k) { return it.key() == k; })) continue;
    std::string list;
    for (const char* k : known) list += list.empty() ? std::string(k) : cat(", ", k);
    fail("unknown field ", srv_show_name(it.key()),
         list.empty() ? std::string(" (this request takes no fields)") : cat(" (known fields: ", list, ")"));
  }
}

// A member, or null when absent or null (null reads as absent).
const json* srv_field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<std::string> srv_string(const json& body, const char* name) {
  const json* v = srv_field(body, name);
  if (v == nullptr) return std::nullopt;
  K3_CHECK(v->is_string(), name, ": must be a string (got ", srv_show(*v), ")");
  std::string s = v->get<std::string>();
  K3_CHECK(s.find('\0') == std::string::npos, name, ": must not contain NUL characters");
  return s;
}

std::optional<bool> srv_bool(const json& body, const char* name) {
  const json* v = srv_field(body, name);
  if (v == nullptr) return std::nullopt;
  K3_CHECK(v->is_boolean(), name, ": must be true or false (got ", srv_show(*v), ")");
  return v->get<bool>();
}

std::optional<int64_t> srv_integer(const json& body, const char* name, int64_t lo, int64_t hi) {
  const json* v = srv_field(body, name);
  if (v == nullptr) return std::nullopt;
  K3_CHECK(v->is_number_integer(), name, ": must be an integer (got ", srv_show(*v), ")");
  const bool huge = v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi);
  const int64_t x = huge ? hi : v->get<int64_t>();
  K3_CHECK(!huge && x >= lo && x <= hi, name, ": must be between ", lo, " and ", hi, " (got ", srv_show(*v), ")");
  return x;
}

std::optional<double> srv_number(const json& body, const char* name, double lo, double hi) {
  const json* v = srv_field(body, name);
  if (v == nullptr) return std::nullopt;
  K3_CHECK(v->is_number(), name, ": must be a number (got ", srv_show(*v), ")");
  const double x = v->get<double>();
  K3_CHECK(std::isfinite(x) && x >= lo && x <= hi, name, ": must be between ", lo, " and ", hi, " (got ",
           srv_show(*v), ")");
  return x;
}

std::optional<double> srv_seconds(const json& body, const char* name, double max) {
  const json* v = srv_field(body, name);
  if (v == nullptr) return std::nullopt;
  K3_CHECK(v->is_number(), name, ": must be a number of seconds (got ", srv_show(*v), ")");
  const double s = v->get<double>();
  K3_CHECK(std::isfinite(s) && s > 0 && s <= max, name, ": must be more than 0 and at most ", max,
           " seconds (got ", srv_show(*v), ")");
  return s;
}

// Environment variables: names without '=' or NUL, string values.
std::map<std::string, std::string> srv_env(const json& body, const char* name) {
  std::map<std::string, std::string> env;
  const json* v = srv_field(body, name);
  if (v == nullptr) return env;
  K3_CHECK(v->is_object(), name, ": must be an object of strings (got ", srv_show(*v), ")");
  for (auto it = v->begin(); it != v->end(); ++it) {
    const std::string& key = it.key();
    K3_CHECK(!key.empty() && key.find_first_of(std::string_view("=\0", 2)) == std::string::npos, name,
             ": variable names must be non-empty, without '=' or NUL (got ", srv_show_name(key), ")");
    K3_CHECK(it->is_string(), name, ".", key, ": must be a string (got ", srv_show(*it), ")");
    const std::string value = it->get<std::string>();
    K3_CHECK(value.find('\0') == std::string::npos, name, ".", key, ": must not contain NUL characters");
    env[key] = value;
  }
  return env;
}

json srv_metadata(const json& body) {
  const json* v = srv_field(body, "metadata");
  if (v == nullptr) return json::object();
  K3_CHECK(v->is_object(), "metadata: must be an object (got ", srv_show(*v), ")");
  for (auto it = v->begin(); it != v->end(); ++it)
    K3_CHECK(it->is_string() || it->is_number() || it->is_boolean(), "metadata.", it.key(),
             ": must be a string, number or boolean (got ", srv_show(*it), ")");
  return *v;
}

json srv_info_json(const SandboxInfo& info) {
  json j = to_json(info);
  j["sandboxID"] = info.id;
  return j;
}

// A query parameter naming a path inside the sandbox.
std::string srv_path_param(const httplib::Request& q, const char* fallback = nullptr) {
  if (!q.has_param("path")) {
    if (fallback != nullptr) return fallback;
    fail("path: the query parameter path is required (the file's path in the sandbox, e.g. ?path=/workspace/a.txt)");
  }
  const std::string path = q.get_param_value("path");
  K3_CHECK(!path.empty(), "path: must not be empty");
  K3_CHECK(path.find('\0') == std::string::npos, "path: must not contain NUL characters");
  return path;
}

bool srv_flag_param(const httplib::Request& q, const char* name) {
  if (!q.has_param(name)) return false;
  const std::string v = q.get_param_value(name);
  if (v == "1" || v == "true") return true;
  if (v == "0" || v == "false" || v.empty()) return false;
  fail(name, ": must be 1, true, 0 or false (got ", srv_show(json(v)), ")");
}

// How much of `s` ends on a whole UTF-8 sequence: a chunk of output may end inside one, whose
// remaining bytes come with the next chunk.
size_t srv_utf8_whole(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

}  // namespace

EnvServer::EnvServer(std::unique_ptr<SandboxManager> manager, EnvServerOptions options)
    : options_(std::move(options)), svr_(std::make_unique<httplib::Server>()), manager_(std::move(manager)) {
  K3_CHECK(options_.threads >= 1, "env server: threads must be at least 1 (got ", options_.threads, ")");
  K3_CHECK(options_.max_body_bytes >= 1, "env server: the body limit must be at least 1 byte");
  K3_CHECK(options_.port >= 0 && options_.port <= 65535, "env server: port ", options_.port,
           " is outside 0..65535");
  const size_t threads = static_cast<size_t>(options_.threads);
  svr_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr_->set_payload_max_length(options_.max_body_bytes);
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which would let a second server
  // silently share a port already in use.
  svr_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof yes);
  });
  // A client that asks before sending (Expect: 100-continue; curl does for bodies over 1 MiB)
  // hears at once that a declared body is too large, and sends nothing.
  svr_->set_expect_100_continue_handler([this](const httplib::Request& q, httplib::Response& r) {
    const int64_t declared = srv_declared_length(q);
    if (declared == -2) {
      srv_send_error(r, 400, cat("Content-Length '", q.get_header_value("Content-Length"), "' is not a byte count"));
      return 400;
    }
    if (declared > 0 && static_cast<uint64_t>(declared) > options_.max_body_bytes) {
      srv_send_error(r, 413, srv_too_large(options_.max_body_bytes));
      return 413;
    }
    return 100;
  });
  svr_->set_keep_alive_timeout(kSrvKeepAliveSeconds);
  svr_->set_read_timeout(30);
  svr_->set_write_timeout(30);
  routes();
}

EnvServer::~EnvServer() { stop(); }

std::shared_lock<std::shared_mutex> EnvServer::use_manager() const {
  std::shared_lock<std::shared_mutex> lock(manager_mu_);
  if (manager_ == nullptr || stopping_.load())
    throw SrvHttpError(503, manager_ == nullptr && !stopping_.load() ? "this server has no sandbox manager"
                                                                      : "the server is shutting down");
  return lock;
}

std::shared_ptr<Sandbox> EnvServer::sandbox(const std::string& id) const {
  const auto lock = use_manager();
  return manager_->get(id);
}

json EnvServer::info_json(const std::string& id) const {
  const auto lock = use_manager();
  return srv_info_json(manager_->info(id));
}

void EnvServer::count_command(const ExecResult* result) {
  commands_.fetch_add(1, std::memory_order_relaxed);
  if (result != nullptr && result->timed_out) command_timeouts_.fetch_add(1, std::memory_order_relaxed);
  if (result == nullptr || result->exit_code != 0 || result->signal != 0 || result->timed_out || result->output_limit)
    command_failures_.fetch_add(1, std::memory_order_relaxed);
}

void EnvServer::create(const std::string& text, httplib::Response& res) {
  const json body = srv_parse_object(text);
  srv_only_fields(body, {"template", "timeout", "autoPause", "network", "memoryMB", "pids", "cpuWeight", "cpus",
                         "envVars", "metadata"});
  CreateOptions o;
  if (auto v = srv_string(body, "template")) {
    K3_CHECK(!options_.templates_dir.empty(), "template: this server offers no templates (start it with --templates DIR)");
    K3_CHECK(!v->empty() && *v != "." && *v != ".." &&
                 v->find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
                     std::string::npos,
             "template: a folder name in the server's template folder (letters, digits, '.', '_', '-'), got ",
             srv_show(json(*v)));
    o.spec.template_dir = options_.templates_dir + "/" + *v;
  }
  o.ttl_s = srv_seconds(body, "timeout", kSrvMaxTtlSeconds);
  if (auto v = srv_bool(body, "autoPause")) o.auto_pause = *v;
  if (auto v = srv_string(body, "network")) {
    K3_CHECK(*v == "none" || *v == "loopback", "network: must be \"none\" or \"loopback\" (got ", srv_show(json(*v)),
             ")");
    o.spec.network = *v == "loopback" ? Network::kLoopback : Network::kNone;
  }
  if (auto v = srv_integer(body, "memoryMB", 16, int64_t{1} << 20)) o.spec.limits.memory_bytes = *v << 20;
  if (auto v = srv_integer(body, "pids", 8, int64_t{1} << 22)) o.spec.limits.pids = *v;
  if (auto v = srv_integer(body, "cpuWeight", 1, 10000)) o.spec.limits.cpu_weight = static_cast<int>(*v);
  if (auto v = srv_number(body, "cpus", 0, 4096)) o.spec.limits.cpus = *v;
  o.spec.env = srv_env(body, "envVars");
  o.metadata = srv_metadata(body);
  json info;
  {
    const auto lock = use_manager();
    info = srv_info_json(manager_->info(manager_->create(o)->id()));
  }
  srv_send_json(res, 201, info);
}

void EnvServer::run_command(const std::string& id, const std::string& text, httplib::Response& res) {
  const json body = srv_parse_object(text);
  srv_only_fields(body, {"cmd", "cwd", "envs", "timeout", "outputCap", "stdin", "stream"});
  ExecRequest request;
  const std::optional<std::string> cmd = srv_string(body, "cmd");
  K3_CHECK(cmd && !cmd->empty(), "cmd: required: the command line, run by /bin/sh -c");
  request.command = *cmd;
  if (auto v = srv_string(body, "cwd")) {
    K3_CHECK(!v->empty(), "cwd: must not be empty");
    request.cwd = *v;
  }
  request.env = srv_env(body, "envs");
  if (auto v = srv_seconds(body, "timeout", kSrvMaxCommandSeconds)) request.timeout_s = *v;
  if (auto v = srv_integer(body, "outputCap", 0, static_cast<int64_t>(request.max_output)))
    request.output_cap = static_cast<size_t>(*v);
  if (auto v = srv_string(body, "stdin")) request.stdin_data = std::move(*v);
  const bool stream = srv_bool(body, "stream").value_or(false);

  std::shared_ptr<Sandbox> sb = sandbox(id);
  if (stream) {
    // Refused with a status while one can still be sent: once streaming, only a line can say it.
    if (sb->state() == SandboxState::kPaused) throw Conflict(cat("sandbox ", id, " is paused: resume it first"));
    stream_command(std::move(sb), std::move(request), res);
    return;
  }
  ExecResult result;
  try {
    result = sb->exec(request);
  } catch (const Conflict&) {
    throw;
  } catch (...) {
    count_command(nullptr);
    throw;
  }
  count_command(&result);
  srv_send_json(res, 200, to_json(result));
}

void EnvServer::stream_command(std::shared_ptr<Sandbox> sb, ExecRequest request, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  // httplib calls the provider once the handler has returned, outside its try: nothing may leave
  // it.  A client that goes away ends the command too (ExecRequest::cancelled).
  res.set_chunked_content_provider(
      "application/x-ndjson", [this, sb = std::move(sb), request = std::move(request)](size_t, httplib::DataSink& sink) {
        bool open = true;  // false once a write failed: the client is gone
        const auto line = [&](const json& j) {
          if (!open) return;
          const std::string s = srv_dump(j) + "\n";
          open = sink.write(s.data(), s.size());
        };
        std::string pending[2];  // per stream: the start of a UTF-8 sequence the next chunk ends
        const auto emit = [&](int stream, bool all) {
          std::string& p = pending[stream == 2 ? 1 : 0];
          const size_t n = all ? p.size() : srv_utf8_whole(p);
          if (n == 0) return;
          line(json{{stream == 2 ? "stderr" : "stdout", p.substr(0, n)}});
          p.erase(0, n);
        };
        try {
          ExecRequest run = request;
          run.cancelled = [&] { return !open || (sink.is_writable && !sink.is_writable()); };
          const ExecResult result = sb->exec(run, [&](int stream, std::string_view chunk) {
            if (!open) return;
            pending[stream == 2 ? 1 : 0].append(chunk);
            emit(stream, false);
          });
          count_command(&result);
          emit(1, true);
          emit(2, true);
          line(json{{"end", to_json(result)}});
        } catch (...) {
          std::string message;
          const int status = srv_status_of(message);
          if (status != 409) count_command(nullptr);
          try {
            line(json{{"error", {{"code", status}, {"message", message}}}});
          } catch (...) {
            open = false;
          }
        }
        if (open) sink.done();
        return open;
      });
}

void EnvServer::upload(const httplib::Request& req, const std::string& body, httplib::Response& res) {
  const std::string path = srv_path_param(req);
  const bool append = srv_flag_param(req, "append");
  const FileLimits limits{options_.max_body_bytes, options_.max_body_bytes};
  std::shared_ptr<Sandbox> sb = sandbox(req.matches[1]);
  sb->write_file(path, body, append, limits);
  json j = to_json(sb->stat(path));
  j["path"] = path;
  srv_send_json(res, 200, j);
}

std::string EnvServer::metrics() const {
  std::string out;
  {
    std::shared_lock<std::shared_mutex> lock(manager_mu_);
    if (manager_ != nullptr && !stopping_.load()) {
      size_t running = 0, paused = 0;
      for (const SandboxInfo& info : manager_->list()) ++(info.state == SandboxState::kPaused ? paused : running);
      out += cat("# HELP k3env_sandboxes Sandboxes held by the server, by state.\n",
                 "# TYPE k3env_sandboxes gauge\n",
                 "k3env_sandboxes{state=\"running\"} ", running, "\n",
                 "k3env_sandboxes{state=\"paused\"} ", paused, "\n");
    }
  }
  out += cat("# HELP k3env_commands_total Commands run in sandboxes.\n",
             "# TYPE k3env_commands_total counter\n",
             "k3env_commands_total ", commands_.load(), "\n",
             "# HELP k3env_command_failures_total Commands that failed: a non-zero exit, a signal, a timeout, too "
             "much output, or no start.\n",
             "# TYPE k3env_command_failures_total counter\n",
             "k3env_command_failures_total ", command_failures_.load(), "\n",
             "# HELP k3env_command_timeouts_total Commands killed at their timeout.\n",
             "# TYPE k3env_command_timeouts_total counter\n",
             "k3env_command_timeouts_total ", command_timeouts_.load(), "\n",
             "# HELP k3env_http_errors_total Requests answered with an error status, by class.\n",
             "# TYPE k3env_http_errors_total counter\n",
             "k3env_http_errors_total{class=\"4xx\"} ", client_errors_.load(), "\n",
             "k3env_http_errors_total{class=\"5xx\"} ", server_errors_.load(), "\n");
  return out;
}

void EnvServer::routes() {
  using Request = httplib::Request;
  using Response = httplib::Response;
  using BodyHandler = std::function<void(const Request&, const std::string& body, Response&)>;
  const size_t limit = options_.max_body_bytes;
  // Every route of a method with a body is in httplib's content-reader form (srv_read_body).
  const auto with_body = [limit](BodyHandler f) {
    return [limit, f = std::move(f)](const Request& q, Response& r, const httplib::ContentReader& reader) {
      srv_answer(r, [&] { f(q, srv_read_body(q, r, reader, limit), r); });
    };
  };
  const auto plain = [](std::function<void(const Request&, Response&)> f) {
    return [f = std::move(f)](const Request& q, Response& r) { srv_answer(r, [&] { f(q, r); }); };
  };
  const std::string one = R"(/sandboxes/([^/]+))";  // one sandbox: matches[1] is its id

  svr_->Post("/sandboxes", with_body([this](const Request&, const std::string& b, Response& r) { create(b, r); }));
  svr_->Get("/sandboxes", plain([this](const Request&, Response& r) {
    json list = json::array();
    {
      const auto lock = use_manager();
      for (const SandboxInfo& info : manager_->list()) list.push_back(srv_info_json(info));
    }
    srv_send_json(r, 200, json{{"sandboxes", std::move(list)}});
  }));
  svr_->Get(one, plain([this](const Request& q, Response& r) { srv_send_json(r, 200, info_json(q.matches[1])); }));
  svr_->Delete(one, with_body([this](const Request& q, const std::string&, Response& r) {
    const auto lock = use_manager();
    manager_->destroy(q.matches[1]);
    r.status = 204;
  }));
  svr_->Post(one + "/pause", with_body([this](const Request& q, const std::string& b, Response& r) {
    srv_only_fields(srv_parse_object(b), {});
    const auto lock = use_manager();
    manager_->pause(q.matches[1]);
    srv_send_json(r, 200, srv_info_json(manager_->info(q.matches[1])));
  }));
  svr_->Post(one + "/resume", with_body([this](const Request& q, const std::string& b, Response& r) {
    const json body = srv_parse_object(b);
    srv_only_fields(body, {"timeout"});
    const std::optional<double> ttl = srv_seconds(body, "timeout", kSrvMaxTtlSeconds);
    const auto lock = use_manager();
    manager_->resume(q.matches[1], ttl);
    srv_send_json(r, 200, srv_info_json(manager_->info(q.matches[1])));
  }));
  svr_->Post(one + "/fork", with_body([this](const Request& q, const std::string& b, Response& r) {
    const json body = srv_parse_object(b);
    srv_only_fields(body, {"count", "timeout"});
    const int count = static_cast<int>(srv_integer(body, "count", 1, kSrvMaxForks).value_or(1));
    const std::optional<double> ttl = srv_seconds(body, "timeout", kSrvMaxTtlSeconds);
    json children = json::array();
    {
      const auto lock = use_manager();
      for (const auto& child : manager_->fork(q.matches[1], count, ttl))
        children.push_back(srv_info_json(manager_->info(child->id())));
    }
    srv_send_json(r, 201, json{{"sandboxes", std::move(children)}});
  }));
  svr_->Post(one + "/timeout", with_body([this](const Request& q, const std::string& b, Response& r) {
    const json body = srv_parse_object(b);
    srv_only_fields(body, {"timeout"});
    const std::optional<double> ttl = srv_seconds(body, "timeout", kSrvMaxTtlSeconds);
    K3_CHECK(ttl.has_value(), "timeout: required: the sandbox's new time to live, in seconds from now");
    const auto lock = use_manager();
    manager_->set_timeout(q.matches[1], *ttl);
    srv_send_json(r, 200, srv_info_json(manager_->info(q.matches[1])));
  }));
  svr_->Post(one + "/commands", with_body([this](const Request& q, const std::string& b, Response& r) {
    run_command(q.matches[1], b, r);
  }));
  svr_->Get(one + "/files", plain([this](const Request& q, Response& r) {
    const std::string path = srv_path_param(q);
    const FileLimits limits{options_.max_body_bytes, options_.max_body_bytes};
    r.set_content(sandbox(q.matches[1])->read_file(path, limits), "application/octet-stream");
  }));
  const auto upload_route = with_body([this](const Request& q, const std::string& b, Response& r) { upload(q, b, r); });
  svr_->Put(one + "/files", upload_route);
  svr_->Post(one + "/files", upload_route);
  svr_->Get(one + "/files/list", plain([this](const Request& q, Response& r) {
    const std::string path = srv_path_param(q, "/workspace");
    json entries = json::array();
    for (const DirEntry& e : sandbox(q.matches[1])->list_dir(path)) entries.push_back(to_json(e));
    srv_send_json(r, 200, json{{"path", path}, {"entries", std::move(entries)}});
  }));
  svr_->Get(one + "/files/stat", plain([this](const Request& q, Response& r) {
    const std::string path = srv_path_param(q);
    json j = to_json(sandbox(q.matches[1])->stat(path));
    j["path"] = path;
    srv_send_json(r, 200, j);
  }));
  svr_->Get("/health", [this](const Request&, Response& r) {
    if (stopping_.load()) return srv_send_error(r, 503, "the server is shutting down");
    srv_send_json(r, 200, json{{"status", "ok"}, {"cgroups", host_support().cgroups}});
  });
  svr_->Get("/metrics", plain([this](const Request&, Response& r) {
    r.set_content(metrics(), "text/plain; version=0.0.4; charset=utf-8");
  }));
  // Any other path with a body method: 404 (written by the error handler) once past the body.
  // Registered last, as httplib tries content-reader routes in order.
  const auto no_route = [limit](const Request& q, Response& r, const httplib::ContentReader& reader) {
    try {
      srv_read_body(q, r, reader, limit, /*keep=*/false);
    } catch (const SrvHttpError&) {
    }
    r.status = 404;
  };
  svr_->Post(".*", no_route);
  svr_->Put(".*", no_route);
  svr_->Patch(".*", no_route);
  svr_->Delete(".*", no_route);
  // Statuses httplib sets itself (404 unknown path, 400 unparsable request, 414 request line too
  // long) get the envelope too.
  svr_->set_error_handler([limit](const Request& q, Response& r) {
    if (!r.body.empty()) return;
    std::string message;
    switch (r.status) {
      case 404: message = cat("no route for ", q.method, " ", q.path); break;
      case 413: message = srv_too_large(limit); break;
      case 400: message = "the request is not valid HTTP/1.1 (request line or headers) or uses an unsupported method"; break;
      case 414: message = "the request line is too long"; break;
      default: message = cat("HTTP ", r.status); break;
    }
    srv_send_error(r, r.status, message);
  });
  svr_->set_exception_handler([](const Request&, Response& r, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (...) {
      std::string message;
      const int status = srv_status_of(message);
      srv_send_error(r, status, message);
    }
  });
  svr_->set_pre_routing_handler([this](const Request& q, Response& r) {
    if (options_.api_key.empty() || q.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    const std::string key = q.get_header_value("X-API-Key");
    if (srv_same_key(key, options_.api_key)) return httplib::Server::HandlerResponse::Unhandled;
    // The body, if any, is left unread: the client is told to close the connection.
    if (srv_declares_body(q) && q.get_header_value("Content-Length") != "0") r.set_header("Connection", "close");
    srv_send_error(r, 401, key.empty() ? "missing API key: send the header X-API-Key" : "invalid API key");
    return httplib::Server::HandlerResponse::Handled;
  });
  svr_->set_logger([this](const Request& q, const Response& r) {
    if (r.status >= 500)
      server_errors_.fetch_add(1, std::memory_order_relaxed);
    else if (r.status >= 400)
      client_errors_.fetch_add(1, std::memory_order_relaxed);
    log_info(q.method, " ", q.path, " -> ", r.status);
  });
}

int EnvServer::bind() {
  K3_CHECK(port_ < 0, "env server: already bound to port ", port_);
  if (options_.port == 0) {
    const int port = svr_->bind_to_any_port(options_.host);
    K3_CHECK(port > 0, "cannot listen on ", options_.host, " (any port)");
    port_ = port;
  } else {
    K3_CHECK(svr_->bind_to_port(options_.host, options_.port), "cannot listen on ", options_.host, ":",
             options_.port, " (is the port in use, or the address not local?)");
    port_ = options_.port;
  }
  deepen_listen_backlog(port_);
  return port_;
}

void EnvServer::listen(bool stop_on_signals) {
  K3_CHECK(port_ > 0, "env server: bind() before listen()");
  listening_ = true;
  if (stopping_.load()) {
    listening_ = false;
    return;
  }
  std::atomic<bool> done{false};
  std::thread watcher;
  if (stop_on_signals) {
    srv_signal.store(0);
    struct sigaction sa {};
    sa.sa_handler = srv_on_signal;
    // A second Ctrl-C / SIGTERM takes the default action: it ends a server whose stop waits.
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    watcher = std::thread([this, &done] {
      while (!done.load()) {
        if (srv_signal.load(std::memory_order_relaxed) != 0) {
          log_info("k3 env: stopping on signal ", srv_signal.load());
          stop();
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  }
  bool served = false;
  std::string error;
  try {
    served = svr_->listen_after_bind();
  } catch (const std::exception& e) {
    error = e.what();  // not one worker thread started
  }
  listening_ = false;  // before joining: a stop() in the watcher waits on it
  done = true;
  if (watcher.joinable()) watcher.join();
  if (!error.empty() || (!served && !stopping_.load())) {
    stop();
    fail("cannot serve on ", options_.host, ":", port_, error.empty() ? std::string() : cat(": ", error));
  }
}

void EnvServer::stop() {
  const std::lock_guard<std::mutex> once(stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  stopping_ = true;
  // listen() may be between its start and httplib's accept loop, where httplib's stop() does
  // nothing: wait until the loop runs (or listen() has returned).
  while (listening_.load() && !svr_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  svr_->stop();
  // Requests in the middle of a manager call finish it first; later ones get 503.  Destroying the
  // manager kills the running commands, so the requests waiting on them end too.
  std::unique_ptr<SandboxManager> manager;
  {
    const std::unique_lock<std::shared_mutex> lock(manager_mu_);
    manager = std::move(manager_);
  }
  manager.reset();
}

}  // namespace k3::agentenv
