// The sandboxes of one host: creation, lookup, life cycle and what survives a restart.
//
// Life cycle (as AgentENV / E2B): every sandbox has a TTL; when it expires the sandbox is paused
// (auto_pause, the default) or destroyed.  Pause freezes its cgroup; resume thaws it.  Fork makes
// N children from the parent's files at that instant (the parent is frozen while its writable
// layer is copied): the children start with fresh processes, since process state is not copied
// (docs/agentenv.md says why).  Every sandbox's files and settings live in
// `state_dir/<id>/`; a new manager over the same state_dir finds the sandboxes of the previous
// one as paused (their files kept, their processes gone: they ended with the previous server),
// and resume() starts them again over their files.
//
// When the process holding the manager dies, however it dies, no sandbox process survives it:
// each PID 1 has the parent-death signal, and a small guardian process forked at construction
// thaws and kills whatever is left in the manager's cgroups once the manager's process is gone.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "agentenv/sandbox.h"

namespace k3::agentenv {

struct ManagerOptions {
  std::string state_dir;  // required; one manager at a time per folder (locked)
  // The manager's cgroup, under the process's own; empty: "k3env-" and a hash of state_dir.
  std::string cgroup_name;
  double default_ttl_s = 300;
  int max_sandboxes = 64;     // running and paused together
  double sweep_interval_s = 1;  // how often expired TTLs are acted on
};

struct CreateOptions {
  SandboxSpec spec;
  std::optional<double> ttl_s;  // default: ManagerOptions::default_ttl_s
  bool auto_pause = true;       // on TTL expiry pause (true) or destroy (false)
  nlohmann::json metadata = nlohmann::json::object();
};

struct SandboxInfo {
  std::string id;
  SandboxState state;
  bool processes_alive;
  std::string parent_id;  // set for a fork
  std::string template_dir;
  Network network;
  SandboxLimits limits;
  double created_at = 0;   // Unix time, seconds
  double expires_at = 0;   // TTL deadline (Unix time); 0 while paused
  bool auto_pause = true;
  nlohmann::json metadata;
};
nlohmann::json to_json(const SandboxInfo& info);

// What the host offers, probed once: the cgroup version per controller, and why sandboxes
// cannot run here when they cannot.
struct HostSupport {
  bool ok = false;
  std::string problem;   // when !ok: what is missing, in words
  std::string cgroups;   // "v1", "v2" or "hybrid"
};
const HostSupport& host_support();

class SandboxManager {
 public:
  explicit SandboxManager(ManagerOptions options = {});
  // Kills every running sandbox's processes; files and settings stay (paused on next start).
  ~SandboxManager();
  SandboxManager(const SandboxManager&) = delete;
  SandboxManager& operator=(const SandboxManager&) = delete;

  const ManagerOptions& options() const { return options_; }

  std::shared_ptr<Sandbox> create(const CreateOptions& options);
  std::shared_ptr<Sandbox> get(const std::string& id) const;  // NotFound when absent
  SandboxInfo info(const std::string& id) const;
  std::vector<SandboxInfo> list() const;

  void pause(const std::string& id);
  void resume(const std::string& id, std::optional<double> ttl_s = {});
  // N children from the parent's files now; the parent keeps its state (a running parent is
  // frozen only while its files are copied).
  std::vector<std::shared_ptr<Sandbox>> fork(const std::string& id, int count,
                                             std::optional<double> ttl_s = {});
  void set_timeout(const std::string& id, double ttl_s);
  void destroy(const std::string& id);  // processes, files, cgroups; NotFound when absent

 private:
  struct Entry {
    std::shared_ptr<Sandbox> sandbox;
    std::string parent_id;
    double created_at = 0, expires_at = 0, ttl_s = 0;
    bool auto_pause = true;
    nlohmann::json metadata;
  };
  Entry& entry(const std::string& id);
  const Entry& entry(const std::string& id) const;
  std::shared_ptr<Sandbox> make(const std::string& id, const SandboxSpec& spec, uint32_t uid_base);
  void save(const std::string& id, const Entry& e) const;  // meta.json
  void load_existing();
  uint32_t free_uid_base() const;
  std::string new_id() const;
  void sweep_loop();
  void start_guardian();

  ManagerOptions options_;
  int lock_fd_ = -1;  // flock on state_dir/.lock
  mutable std::mutex mu_;
  std::map<std::string, Entry> sandboxes_;
  std::set<uint32_t> reserved_bases_;  // uid ranges of children a fork is copying
  std::condition_variable sweep_cv_;
  bool stopping_ = false;
  std::thread sweeper_;
  int guardian_pipe_ = -1;  // write end; the guardian wakes when it closes
  int guardian_pid_ = -1;
};

}  // namespace k3::agentenv
