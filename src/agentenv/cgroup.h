// Cgroups for sandboxes, on cgroup v2, v1 or a hybrid of both (probed per controller from
// /proc/self/mountinfo and /proc/self/cgroup, never assumed).
//
// A manager owns a group under the process's own cgroup (e.g. .../k3env); each sandbox gets a
// group below it with the limits, and each sandbox has leaf groups: "init" for its PID 1 and
// "c<N>" per command, so a command's whole process tree can be frozen and killed without touching
// the rest of the sandbox.  v2 forbids processes in inner groups, hence the leaves on v1 too.
//
//   memory   v1 memory.limit_in_bytes (+ memory.memsw where swap is accounted); v2 memory.max,
//            memory.swap.max
//   pids     pids.max (both)
//   cpu      v1 cpu.shares (+ cfs quota); v2 cpu.weight (+ cpu.max)
//   freeze   v1 freezer.state; v2 cgroup.freeze
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace k3::agentenv {

struct SandboxLimits;

// Where each controller lives for this process.  Probed once (cgroup_layout()).
struct CgroupLayout {
  bool ok = false;
  std::string problem;  // when !ok
  std::string version;  // "v1", "v2" or "hybrid"
  // The directories (cgroup mount + this process's own group) that hold the manager groups, one
  // per hierarchy used; `v2` marks the unified one.
  struct Hierarchy {
    std::string dir;
    bool v2 = false;
    bool memory = false, pids = false, cpu = false, freezer = false;
  };
  std::vector<Hierarchy> hierarchies;
};
const CgroupLayout& cgroup_layout();

class CgroupTree {
 public:
  // The group `relative` (e.g. "k3env/sb-1a2b") under the process's own groups, created (with its
  // parents) in every hierarchy.  Throws k3::Error naming the file that could not be written.
  explicit CgroupTree(const std::string& relative);
  ~CgroupTree();  // leaves the groups; remove() deletes them
  CgroupTree(const CgroupTree&) = delete;
  CgroupTree& operator=(const CgroupTree&) = delete;

  void set_limits(const SandboxLimits& limits);

  // A leaf below this group (created when missing); returns the cgroup.procs files a process
  // writes "0" into to join it, one per hierarchy.
  std::vector<std::string> leaf_procs_files(const std::string& leaf);

  void freeze(const std::string& leaf = "");  // the whole group, or one leaf; waits until frozen
  void thaw(const std::string& leaf = "", bool wait = true);
  bool frozen(const std::string& leaf = "") const;  // frozen or freezing, by itself or an ancestor
  // Freezes, SIGKILLs every process, thaws, and waits (up to ~2 s) until none is left; in a
  // frozen (paused) group the processes die when it thaws, and this does not wait.
  void kill_all(const std::string& leaf = "");
  std::vector<int> pids(const std::string& leaf = "") const;  // processes in it and below
  // Processes of the group killed by its memory limit so far.
  uint64_t oom_kills() const;
  // Deletes the leaves and the group itself (killing what is left first).
  void remove(const std::string& leaf = "");

  // Best effort, for the manager's guardian and for stale groups: kills every process under the
  // given folders (the same group in each hierarchy, dirs_of) and deletes the groups bottom up.
  // Plain system calls on fixed buffers, so a forked child may call it.
  static void kill_and_remove_trees(const std::vector<std::string>& dirs);
  // The manager group's directories, one per hierarchy (for the guardian and for cleanup).
  static std::vector<std::string> dirs_of(const std::string& relative);

 private:
  std::string path(const CgroupLayout::Hierarchy& h, const std::string& leaf) const;
  const CgroupLayout::Hierarchy* freezer() const;
  std::string relative_;
};

}  // namespace k3::agentenv
