// Runs the built `k3 serve` as a child process on a free port (--port 0; the port is read from
// its "listening on" line) and waits until /health says 200.  The destructor sends SIGTERM and
// reaps it (SIGKILL after a grace period).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace k3::testing {

class ServerProcess {
 public:
  // Throws std::runtime_error (with the server's stderr) when it does not come up.
  // launcher: words before the k3 binary (e.g. mpirun and its options; the first one a path).
  explicit ServerProcess(const std::vector<std::string>& serve_args, const std::vector<std::string>& launcher = {});
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  std::string base_url() const;  // http://127.0.0.1:PORT
  // Stops it now; the exit status (as from waitpid).
  int stop();

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string err_path_;
};

}  // namespace k3::testing
