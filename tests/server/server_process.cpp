#include "server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

#include <httplib.h>

#include "support/test_support.h"

namespace k3::testing {

ServerProcess::ServerProcess(const std::vector<std::string>& serve_args, const std::vector<std::string>& launcher) {
  int out[2];
  if (pipe(out) != 0) throw std::runtime_error("pipe failed");
  char tmpl[] = "/tmp/k3-serve-stderr-XXXXXX";
  const int errfd = mkstemp(tmpl);
  err_path_ = tmpl;
  std::vector<std::string> args = launcher;
  for (const char* a : {"serve", "--port", "0"}) args.push_back(a);
  args.insert(args.end() - 3, k3_binary());
  args.insert(args.end(), serve_args.begin(), serve_args.end());
  pid_ = fork();
  if (pid_ == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(errfd, STDERR_FILENO);
    close(out[0]);
    close(out[1]);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  close(errfd);
  // The first stdout line: "k3 serve: listening on http://127.0.0.1:PORT (...)".
  std::string line;
  char c;
  while (read(out[0], &c, 1) == 1 && c != '\n') line.push_back(c);
  close(out[0]);
  const size_t at = line.find("127.0.0.1:");
  if (at == std::string::npos) {
    stop();
    throw std::runtime_error("k3 serve did not start: " + line + "\n" + read_file(err_path_));
  }
  port_ = std::atoi(line.c_str() + at + 10);
  httplib::Client cli("127.0.0.1", port_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = cli.Get("/health");
    if (r && r->status == 200) return;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("k3 serve exited while loading:\n" + read_file(err_path_));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop();
  throw std::runtime_error("k3 serve did not become healthy:\n" + read_file(err_path_));
}

ServerProcess::~ServerProcess() {
  stop();
  if (!err_path_.empty()) unlink(err_path_.c_str());
}

std::string ServerProcess::base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

int ServerProcess::stop() {
  if (pid_ <= 0) return 0;
  kill(pid_, SIGTERM);
  int status = 0;
  for (int i = 0; i < 600; ++i) {  // 30 s
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

}  // namespace k3::testing
