#include "agentenv/sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <optional>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "agentenv/cgroup.h"
#include "agentenv/isolation.h"

namespace k3::agentenv {
namespace {

using Clock = std::chrono::steady_clock;

// Bytes that are not well-formed UTF-8 become U+FFFD, so command output always fits in JSON.
std::string sb_valid_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && len > 1) {
      // Overlong forms, surrogates and values past U+10FFFF.
      uint32_t cp = c & (0x7F >> len);
      for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      ok = !(len == 2 && cp < 0x80) && !(len == 3 && cp < 0x800) && !(len == 4 && cp < 0x10000) &&
           !(cp >= 0xD800 && cp <= 0xDFFF) && cp <= 0x10FFFF;
    }
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

// One output stream of a command: the first and the last cap/2 bytes, and the total.
class CappedOutput {
 public:
  explicit CappedOutput(size_t cap) : half_(std::max<size_t>(cap / 2, 1)) {}
  void add(const char* data, size_t n) {
    total_ += n;
    size_t to_head = std::min(n, half_ - std::min(half_, head_.size()));
    head_.append(data, to_head);
    data += to_head;
    n -= to_head;
    if (n == 0) return;
    tail_.append(data, n);
    if (tail_.size() > 2 * half_) tail_.erase(0, tail_.size() - half_);
  }
  uint64_t total() const { return total_; }
  std::string text() const {
    std::string tail = tail_.size() > half_ ? tail_.substr(tail_.size() - half_) : tail_;
    const uint64_t kept = head_.size() + tail.size();
    if (kept == total_) return head_ + tail;
    return head_ + "\n[... " + std::to_string(total_ - kept) + " bytes omitted ...]\n" + tail;
  }

 private:
  size_t half_;
  std::string head_, tail_;
  uint64_t total_ = 0;
};

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    K3_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "pipe: ", std::strerror(errno));
    r = fds[0];
    w = fds[1];
  }
  ~Pipe() {
    if (r >= 0) ::close(r);
    if (w >= 0) ::close(w);
  }
  void close_r() {
    if (r >= 0) ::close(r);
    r = -1;
  }
  void close_w() {
    if (w >= 0) ::close(w);
    w = -1;
  }
};

bool sb_valid_env_name(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

}  // namespace

bool ExecResult::truncated() const {
  return stdout_text.size() < stdout_bytes || stderr_text.size() < stderr_bytes || output_limit;
}

nlohmann::json to_json(const ExecResult& r) {
  return {{"exit_code", r.exit_code},   {"signal", r.signal},
          {"timed_out", r.timed_out},   {"output_limit", r.output_limit},
          {"oom_killed", r.oom_killed}, {"cancelled", r.cancelled}, {"stdout", r.stdout_text},
          {"stderr", r.stderr_text},    {"stdout_bytes", r.stdout_bytes},
          {"stderr_bytes", r.stderr_bytes}, {"truncated", r.truncated()},
          {"wall_ms", r.wall_ms}};
}

nlohmann::json to_json(const DirEntry& e) {
  return {{"name", e.name}, {"type", e.type}, {"size", e.size}, {"mode", e.mode}, {"mtime", e.mtime}};
}

const char* state_name(SandboxState s) { return s == SandboxState::kRunning ? "running" : "paused"; }

Sandbox::Sandbox(std::string id, SandboxSpec spec, std::string dir, uint32_t uid_base,
                 std::unique_ptr<CgroupTree> cgroup)
    : id_(std::move(id)), spec_(std::move(spec)), dir_(std::move(dir)), uid_base_(uid_base), cgroup_(std::move(cgroup)) {}

Sandbox::~Sandbox() {
  try {
    stop();
  } catch (const std::exception&) {
  }
}

SandboxState Sandbox::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

bool Sandbox::alive_locked() const {
  if (init_pid_ <= 0) return false;
  if (::waitpid(init_pid_, nullptr, WNOHANG) == 0) return true;
  init_pid_ = -1;  // reaped now (or by another thread): the pid may be reused from here on
  return false;
}

bool Sandbox::processes_alive() const {
  std::lock_guard<std::mutex> lock(mu_);
  return alive_locked();
}

void Sandbox::start() {
  // Overlayfs wants an empty, unused work folder.
  std::filesystem::remove_all(dir_ + "/work");
  std::filesystem::create_directories(dir_ + "/work");
  std::filesystem::create_directories(dir_ + "/root");
  InitConfig config;
  config.root = dir_ + "/root";
  const std::string lower = spec_.template_dir.empty()
                                ? std::filesystem::path(dir_).parent_path().string() + "/.skeleton"
                                : spec_.template_dir;
  config.overlay_opts = "lowerdir=" + lower + ",upperdir=" + dir_ + "/upper,workdir=" + dir_ + "/work";
  if (spec_.template_dir.empty()) config.ro_binds = host_system_dirs();
  config.cgroup_procs = cgroup_->leaf_procs_files("init");
  config.loopback = spec_.network == Network::kLoopback;
  config.uid_base = uid_base_;
  init_pid_ = spawn_init(config);
  state_ = SandboxState::kRunning;
}

void Sandbox::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (cgroup_) cgroup_->kill_all("");
  if (init_pid_ > 0) {
    ::kill(init_pid_, SIGKILL);
    while (::waitpid(init_pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  init_pid_ = -1;
}

void Sandbox::pause() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == SandboxState::kPaused) return;
  if (init_pid_ > 0) cgroup_->freeze("");
  state_ = SandboxState::kPaused;
}

void Sandbox::resume() {
  std::lock_guard<std::mutex> lock(mu_);
  if (deleted_) throw NotFound(cat("sandbox ", id_, " has been deleted"));
  if (alive_locked()) {
    if (state_ == SandboxState::kPaused) cgroup_->thaw("");
    state_ = SandboxState::kRunning;
    return;
  }
  cgroup_->kill_all("");
  cgroup_->thaw("");
  start();
}

int Sandbox::open_root() const {
  // Opened under the lock: PID 1 is reaped only under it, so its pid cannot be reused meanwhile.
  std::lock_guard<std::mutex> lock(mu_);
  if (deleted_) throw NotFound(cat("sandbox ", id_, " has been deleted"));
  if (!alive_locked()) throw Conflict(cat("sandbox ", id_, " has no running processes (the server restarted): resume it first"));
  const std::string path = "/proc/" + std::to_string(init_pid_) + "/root";
  int fd = ::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Conflict(cat("sandbox ", id_, ": its PID 1 has exited: resume it first"));
  return fd;
}

ExecResult Sandbox::exec(const ExecRequest& req, const OutputSink& sink) {
  K3_CHECK(!req.command.empty(), "command: empty");
  K3_CHECK(req.command.find('\0') == std::string::npos, "command: contains a NUL byte");
  K3_CHECK(req.timeout_s > 0 && req.timeout_s <= 86400, "timeout: must be in (0, 86400] seconds (got ", req.timeout_s, ")");
  K3_CHECK(req.output_cap >= 2 && req.output_cap <= (64u << 20), "output cap: must be 2 bytes to 64 MiB (got ", req.output_cap, ")");
  std::string cwd = req.cwd.empty() ? "/workspace" : req.cwd;
  if (cwd[0] != '/') cwd = "/workspace/" + cwd;
  std::vector<std::string> env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                  "HOME=/root", "USER=root", "LOGNAME=root", "SHELL=/bin/sh",
                                  "LANG=C.UTF-8", "TERM=dumb", "PWD=" + cwd};
  auto add_env = [&](const std::map<std::string, std::string>& vars) {
    for (const auto& [k, v] : vars) {
      K3_CHECK(sb_valid_env_name(k), "environment variable name '", k, "': letters, digits and _ only, not starting with a digit");
      K3_CHECK(v.find('\0') == std::string::npos, "environment variable ", k, ": contains a NUL byte");
      std::erase_if(env, [&](const std::string& e) { return e.rfind(k + "=", 0) == 0; });
      env.push_back(k + "=" + v);
    }
  };
  add_env(spec_.env);
  add_env(req.env);

  int init_pid;
  uint64_t n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (deleted_) throw NotFound(cat("sandbox ", id_, " has been deleted"));
    if (state_ == SandboxState::kPaused) throw Conflict(cat("sandbox ", id_, " is paused: resume it first"));
    // PID 1 ended while the sandbox runs (e.g. its memory limit killed every process): a new one
    // starts over the same files, as a resume would.
    if (!alive_locked()) {
      cgroup_->kill_all("");
      start();
    }
    init_pid = init_pid_;
    n = next_command_++;
  }
  const std::string leaf = "c" + std::to_string(n);
  const uint64_t oom_before = cgroup_->oom_kills();
  Pipe in, out, err, status;
  CommandConfig cfg;
  cfg.init_pid = init_pid;
  cfg.cgroup_procs = cgroup_->leaf_procs_files(leaf);
  cfg.cwd = cwd;
  cfg.command = req.command;
  cfg.env = env;
  cfg.stdin_fd = in.r;
  cfg.stdout_fd = out.w;
  cfg.stderr_fd = err.w;
  cfg.status_fd = status.w;
  const auto t0 = Clock::now();
  int helper;
  try {
    helper = spawn_command(cfg);
  } catch (const Error&) {
    // PID 1 is ending since it was checked (its memory limit, say: its namespaces go before it
    // becomes a zombie): once more over a new one.
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (state_ == SandboxState::kPaused) throw;
      if (init_pid_ == cfg.init_pid || init_pid_ <= 0) {  // not restarted by another command meanwhile
        cgroup_->kill_all("");
        if (init_pid_ > 0) {
          ::kill(init_pid_, SIGKILL);
          while (::waitpid(init_pid_, nullptr, 0) < 0 && errno == EINTR) {
          }
        }
        init_pid_ = -1;
        start();
      }
      cfg.init_pid = init_pid_;
    }
    helper = spawn_command(cfg);
  }
  in.close_r();
  out.close_w();
  err.close_w();
  status.close_w();
  if (req.stdin_data.empty()) in.close_w();
  else ::fcntl(in.w, F_SETFL, O_NONBLOCK);

  ExecResult result;
  CappedOutput outs[2] = {CappedOutput(req.output_cap), CappedOutput(req.output_cap)};
  uint64_t streamed[2] = {0, 0};
  size_t stdin_at = 0;
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(req.timeout_s));
  std::optional<Clock::time_point> shell_done, killed_at;
  bool status_ready = false;
  auto kill_tree = [&] {
    cgroup_->kill_all(leaf);
    if (!killed_at) killed_at = Clock::now();
  };
  char buf[1 << 16];
  // n bytes of stream s (0 stdout, 1 stderr) just read into buf: kept, and streamed within the cap.
  auto take = [&](int s, size_t n) {
    outs[s].add(buf, n);
    if (sink && streamed[s] < req.output_cap) {
      const size_t n_out = std::min<uint64_t>(n, req.output_cap - streamed[s]);
      sink(s + 1, std::string_view(buf, n_out));
      streamed[s] += n_out;
    }
  };
  // Until the shell has ended (its status arrives) and its output is read.  A command that
  // closes its stdout and stderr early is still waited for, under the same deadline.
  while (out.r >= 0 || err.r >= 0 || !status_ready) {
    const auto now = Clock::now();
    if (!killed_at && now >= deadline) {
      result.timed_out = true;
      kill_tree();
    }
    if (!killed_at && req.cancelled && req.cancelled()) {
      result.cancelled = true;
      kill_tree();
    }
    // The shell has ended: what it left in the background may hold the pipes open, so read what
    // is there a moment longer, then stop (the processes keep running in the sandbox).
    if (shell_done && now - *shell_done > std::chrono::milliseconds(200)) break;
    // Killed processes that do not die (a sandbox paused meanwhile keeps them frozen) are left to
    // die when it thaws; the answer does not wait for that.
    if (killed_at && now - *killed_at > std::chrono::seconds(2)) break;
    pollfd fds[4];
    int nfds = 0;
    int which[4];
    if (out.r >= 0) fds[nfds] = {out.r, POLLIN, 0}, which[nfds++] = 0;
    if (err.r >= 0) fds[nfds] = {err.r, POLLIN, 0}, which[nfds++] = 1;
    if (!status_ready) fds[nfds] = {status.r, POLLIN, 0}, which[nfds++] = 2;
    if (in.w >= 0) fds[nfds] = {in.w, POLLOUT, 0}, which[nfds++] = 3;
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    int timeout_ms = killed_at || shell_done ? 50 : static_cast<int>(std::clamp<int64_t>(wait + 1, 1, 1000));
    int ready = ::poll(fds, static_cast<nfds_t>(nfds), timeout_ms);
    if (ready < 0 && errno != EINTR) break;
    for (int i = 0; i < nfds && ready > 0; ++i) {
      if (fds[i].revents == 0) continue;
      if (which[i] == 2) {
        status_ready = true;
        if (!shell_done) shell_done = Clock::now();
        continue;
      }
      if (which[i] == 3) {
        ssize_t w = ::write(in.w, req.stdin_data.data() + stdin_at, req.stdin_data.size() - stdin_at);
        if (w > 0) stdin_at += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN) stdin_at = req.stdin_data.size();
        if (stdin_at >= req.stdin_data.size()) in.close_w();
        continue;
      }
      Pipe& p = which[i] == 0 ? out : err;
      ssize_t r = ::read(p.r, buf, sizeof buf);
      if (r <= 0) {
        if (r == 0 || errno != EAGAIN) p.close_r();
        continue;
      }
      const int s = which[i];
      take(s, static_cast<size_t>(r));
      if (!killed_at && outs[0].total() + outs[1].total() > req.max_output) {
        result.output_limit = true;
        kill_tree();
      }
    }
  }
  // What is already in the pipes belongs to the command even when the loop stopped early (the
  // shell ended while a background process, or another command's helper for a moment, still
  // held a write end): read it without waiting.
  for (int s = 0; s < 2; ++s) {
    Pipe& p = s == 0 ? out : err;
    if (p.r < 0) continue;
    ::fcntl(p.r, F_SETFL, O_NONBLOCK);
    // Bounded: a background writer could refill the pipe as fast as it is read.
    size_t drained = 0;
    for (ssize_t r; drained < (4u << 20) && (r = ::read(p.r, buf, sizeof buf)) > 0; drained += static_cast<size_t>(r)) {
      take(s, static_cast<size_t>(r));
    }
  }
  out.close_r();
  err.close_r();
  in.close_w();
  // The status is there once the shell has ended; when it has not (killed but frozen), the helper
  // outside the sandbox is ended instead of waited for.
  int wait_status = 0;
  ssize_t got = -1;
  if (status_ready) {
    got = ::read(status.r, &wait_status, sizeof wait_status);
  } else {
    ::kill(helper, SIGKILL);
  }
  while (::waitpid(helper, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (got == static_cast<ssize_t>(sizeof wait_status)) {
    if (WIFEXITED(wait_status)) result.exit_code = WEXITSTATUS(wait_status);
    else if (WIFSIGNALED(wait_status)) result.signal = WTERMSIG(wait_status);
  } else {
    result.signal = SIGKILL;
  }
  result.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  result.stdout_bytes = outs[0].total();
  result.stderr_bytes = outs[1].total();
  result.stdout_text = sb_valid_utf8(outs[0].text());
  result.stderr_text = sb_valid_utf8(outs[1].text());
  result.oom_killed = cgroup_->oom_kills() > oom_before;
  // A leaf whose processes have all ended goes; one with processes left running in the
  // background stays until the sandbox ends.
  if (cgroup_->pids(leaf).empty()) cgroup_->remove(leaf);
  return result;
}

}  // namespace k3::agentenv
