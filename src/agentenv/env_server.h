// `k3 env serve`: the sandboxes of one SandboxManager over HTTP/JSON, shaped like AgentENV's and
// E2B's REST API.  Every route but /health needs the header `X-API-Key: KEY` when a key is set.
//
//   POST   /sandboxes                 {template (a name under --templates), timeout, autoPause, network, memoryMB, pids,
//                                     cpuWeight, cpus, envVars, metadata} (all optional) -> 201 info
//   GET    /sandboxes                 {"sandboxes": [info...]}
//   GET    /sandboxes/{id}            info
//   DELETE /sandboxes/{id}            204
//   POST   /sandboxes/{id}/pause      info
//   POST   /sandboxes/{id}/resume     {timeout?} -> info
//   POST   /sandboxes/{id}/fork       {count: 1..16 (1), timeout?} -> 201 {"sandboxes": [info...]}
//   POST   /sandboxes/{id}/timeout    {timeout} -> info
//   POST   /sandboxes/{id}/commands   {cmd, cwd, envs, timeout, outputCap, stdin, stream}
//                                     -> ExecResult (agentenv::to_json); with "stream": true an
//                                     application/x-ndjson body, one object a line:
//                                     {"stdout": text} / {"stderr": text} per chunk, then
//                                     {"end": ExecResult}, or {"error": {code, message}} instead
//   GET    /sandboxes/{id}/files?path=P                 the file's bytes (application/octet-stream)
//   PUT|POST /sandboxes/{id}/files?path=P[&append=1]   raw body -> the file's stat
//   GET    /sandboxes/{id}/files/list?path=P            {"path", "entries": [DirEntry...]}
//   GET    /sandboxes/{id}/files/stat?path=P            DirEntry plus "path"
//   GET    /health                    {"status": "ok", "cgroups": "v1" | "v2" | "hybrid"}
//   GET    /metrics                   Prometheus text: sandboxes by state, commands, failures
//
// info is agentenv::to_json(SandboxInfo) plus "sandboxID".  Timeouts are seconds (numbers).
// Errors are {"code": status, "message": text}: 400 bad input (the message names the field or
// the JSON parse error's position; unknown fields are errors too), 401 API key, 404 no such
// sandbox, file or route, 409 the sandbox's state forbids it (a command in a paused sandbox),
// 411 / 413 body, 503 stopping, 500 faults.  Text in JSON is UTF-8; bytes that are not become
// U+FFFD (the files routes carry bytes as they are).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "agentenv/sandbox_manager.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace k3::agentenv {

struct EnvServerOptions {
  std::string host = "127.0.0.1";
  int port = 8030;          // 0: any free port (bind() says which)
  std::string api_key;      // empty: no key required
  int threads = 64;         // HTTP workers; each request (a running command too) holds one
  size_t max_body_bytes = size_t{64} << 20;  // request bodies, and files read or written
  // Where named templates live: a request's "template" is a folder name in it.  Empty: requests
  // cannot choose a template (a client naming any host folder could show the host's files to
  // the sandbox).
  std::string templates_dir;
};

class EnvServer {
 public:
  // Owns the manager: stop() destroys it, which kills the sandboxes' running processes (their
  // files stay for the next manager), so that requests waiting on commands end.  A null manager
  // serves only /health and /metrics (the sandbox routes answer 503, as after stop()).
  EnvServer(std::unique_ptr<SandboxManager> manager, EnvServerOptions options);
  // Stops; listen() must have returned by then.
  ~EnvServer();
  EnvServer(const EnvServer&) = delete;
  EnvServer& operator=(const EnvServer&) = delete;

  // Binds the socket; returns the port.  Throws k3::Error when it cannot.
  int bind();
  // Serves until stop(), or with stop_on_signals until SIGINT / SIGTERM (a second one ends the
  // process at once).  Returns once every request in flight has ended.
  void listen(bool stop_on_signals = false);
  // From any thread, any number of times: stops accepting, refuses new sandbox requests (503)
  // and destroys the manager.
  void stop();

 private:
  void routes();
  // The manager for one request's calls, held against stop(): 503 once stopping.
  std::shared_lock<std::shared_mutex> use_manager() const;
  std::shared_ptr<Sandbox> sandbox(const std::string& id) const;
  nlohmann::json info_json(const std::string& id) const;

  void create(const std::string& body, httplib::Response& res);
  void run_command(const std::string& id, const std::string& body, httplib::Response& res);
  void stream_command(std::shared_ptr<Sandbox> sandbox, ExecRequest request, httplib::Response& res);
  void upload(const httplib::Request& req, const std::string& body, httplib::Response& res);
  std::string metrics() const;
  void count_command(const ExecResult* result);

  const EnvServerOptions options_;
  std::unique_ptr<httplib::Server> svr_;
  int port_ = -1;

  mutable std::shared_mutex manager_mu_;
  std::unique_ptr<SandboxManager> manager_;  // null once stopped

  std::mutex stop_mu_;
  bool stopped_ = false;                // stop() ran
  std::atomic<bool> stopping_{false};   // set first by stop(): refuse new work
  std::atomic<bool> listening_{false};  // listen() is running

  std::atomic<uint64_t> commands_{0}, command_failures_{0}, command_timeouts_{0};
  std::atomic<uint64_t> client_errors_{0}, server_errors_{0};
};

}  // namespace k3::agentenv
