// One sandbox: an isolated process tree with its own files, made of Linux namespaces, an overlay
// file system and cgroups, with no container runtime (docs/agentenv.md).
//
//   files      overlayfs: a read-only base (a template directory, or the host's system
//              directories) under a private writable layer kept in the sandbox's state folder;
//              /workspace is the working directory, /tmp is private, /proc shows only the
//              sandbox's processes, /dev holds null, zero, full, random, urandom and tty.
//   processes  a PID 1 of its own (a reaper) in new mount, PID, IPC, UTS, network and user
//              namespaces; the sandbox's root is an unprivileged host uid (a range of 65536 uids
//              per sandbox), with no capabilities, no new privileges and a seccomp filter.
//   network    none by default (the loopback interface down); loopback only on request.
//   limits     a cgroup per sandbox (memory, pids, CPU weight), a child cgroup per command so a
//              timeout kills the command's whole tree, pause = freeze.
//
// Commands run through /bin/sh -c with a timeout, an output cap and streamed output.  File access
// (read, write, list) resolves every path inside the sandbox's root with the sandbox root's own
// permissions, so no path, `..` or symlink reaches the host.  A Sandbox is made by the
// SandboxManager (sandbox_manager.h), which also owns its life cycle (TTL, pause, fork).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/error.h"

namespace k3::agentenv {

// A sandbox or file that does not exist (HTTP 404).
class NotFound : public Error {
 public:
  using Error::Error;
};
// An operation the sandbox's state forbids now, e.g. a command in a paused sandbox (HTTP 409).
class Conflict : public Error {
 public:
  using Error::Error;
};

struct SandboxLimits {
  int64_t memory_bytes = int64_t{1} << 30;  // memory (and swap where accounted) of the whole sandbox
  int64_t pids = 512;                       // processes and threads at once
  int cpu_weight = 100;                     // share of CPU against other sandboxes (1..10000)
  double cpus = 0;                          // hard cap in cores (0: none)
};

enum class Network { kNone, kLoopback };

struct SandboxSpec {
  // Read-only base: a directory tree used as the sandbox's root.  Empty: the host's /usr and /etc
  // (and /bin, /lib… where they are not symlinks into /usr), read-only, under an empty root.
  std::string template_dir;
  Network network = Network::kNone;
  SandboxLimits limits;
  std::map<std::string, std::string> env;  // added to every command's environment
};

struct ExecRequest {
  std::string command;  // run by /bin/sh -c
  std::string cwd = "/workspace";
  std::map<std::string, std::string> env;
  double timeout_s = 120;
  size_t output_cap = 64 << 10;          // bytes kept per stream: the first and last half
  uint64_t max_output = 64ull << 20;     // total output past which the command is killed
  std::string stdin_data;
  // Polled while the command runs (at least once a second); true kills it, e.g. when the client
  // that streams its output has gone.
  std::function<bool()> cancelled;
};

struct ExecResult {
  int exit_code = -1;  // -1 when ended by a signal
  int signal = 0;      // the signal that ended it, else 0
  bool timed_out = false;
  bool output_limit = false;  // killed for writing more than max_output
  bool oom_killed = false;    // the sandbox's memory limit killed a process during the command
  bool cancelled = false;     // killed because ExecRequest::cancelled said so
  std::string stdout_text, stderr_text;  // head and tail, with a marker where bytes were dropped
  uint64_t stdout_bytes = 0, stderr_bytes = 0;  // all the command wrote
  bool truncated() const;
  double wall_ms = 0;
};
nlohmann::json to_json(const ExecResult& r);

// Streamed output: stream 1 = stdout, 2 = stderr; called on the exec caller's thread, only for
// bytes within the output cap.
using OutputSink = std::function<void(int stream, std::string_view chunk)>;

struct DirEntry {
  std::string name;
  std::string type;  // "file", "dir", "symlink", "other"
  uint64_t size = 0;
  uint32_t mode = 0;
  int64_t mtime = 0;  // seconds since the epoch
};
nlohmann::json to_json(const DirEntry& e);

struct FileLimits {
  uint64_t max_read = 8ull << 20;   // read_file refuses larger files
  uint64_t max_write = 64ull << 20;
};

enum class SandboxState { kRunning, kPaused };
const char* state_name(SandboxState s);

class CgroupTree;

class Sandbox {
 public:
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  const std::string& id() const { return id_; }
  const SandboxSpec& spec() const { return spec_; }
  SandboxState state() const;
  // Whether its processes are alive (false after a server restart until resume()).
  bool processes_alive() const;

  // Runs a command; throws Conflict when paused, k3::Error when it cannot start.  Many commands
  // may run at once.
  ExecResult exec(const ExecRequest& request, const OutputSink& sink = {});

  // Files, by paths inside the sandbox (absolute, or relative to /workspace).  Throw NotFound for
  // a missing path, k3::Error naming the path for everything else (a directory where a file is
  // expected, too large, outside the sandbox's own file systems such as /proc).
  std::string read_file(const std::string& path, const FileLimits& limits = {}) const;
  // Creates missing parent folders; the new file belongs to the sandbox's root.
  void write_file(const std::string& path, std::string_view data, bool append = false,
                  const FileLimits& limits = {});
  std::vector<DirEntry> list_dir(const std::string& path) const;
  DirEntry stat(const std::string& path) const;

 private:
  friend class SandboxManager;
  Sandbox(std::string id, SandboxSpec spec, std::string dir, uint32_t uid_base,
          std::unique_ptr<CgroupTree> cgroup);

  void start();   // assembles the root and starts PID 1 (sandbox_start.cpp)
  void stop();    // kills every process, leaves the files
  void pause();
  void resume();  // thaws, or restarts PID 1 over the kept files when its processes are gone
  int open_root() const;  // O_PATH fd of the sandbox's root, for the file calls
  bool alive_locked() const;  // PID 1 still runs (reaps it, and forgets its pid, when not)

  const std::string id_;
  const SandboxSpec spec_;
  const std::string dir_;  // state folder: layers/, meta.json
  const uint32_t uid_base_;
  std::unique_ptr<CgroupTree> cgroup_;
  mutable std::mutex mu_;
  SandboxState state_ = SandboxState::kRunning;
  bool deleted_ = false;  // destroyed by the manager; holders of the pointer get NotFound
  mutable int init_pid_ = -1;  // host pid of the sandbox's PID 1, -1 when not running
  uint64_t next_command_ = 0;
};

}  // namespace k3::agentenv
