#include "agentenv/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <fstream>
#include <sstream>
#include <thread>

#include "agentenv/sandbox.h"
#include "base/error.h"

namespace k3::agentenv {
namespace {

std::string cg_read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool cg_try_write(const std::string& path, const std::string& value, int* err = nullptr) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    if (err) *err = errno;
    return false;
  }
  ssize_t n = ::write(fd, value.data(), value.size());
  int e = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    if (err) *err = e;
    return false;
  }
  return true;
}

void cg_write(const std::string& path, const std::string& value) {
  int err = 0;
  if (!cg_try_write(path, value, &err))
    fail("cgroup: cannot write '", value, "' to ", path, ": ", std::strerror(err));
}

bool cg_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

void cg_mkdirs(const std::string& path) {
  std::string cur;
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += "/" + part;
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
      fail("cgroup: cannot create ", cur, ": ", std::strerror(errno));
  }
}

std::vector<std::string> cg_split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, sep)) out.push_back(part);
  return out;
}

// Mount point of a cgroup hierarchy joined with this process's group in it.  A mount whose root
// is not "/" (a cgroup namespace, or a container that bind-mounts its own group) holds the
// process's path relative to that root.
std::string cg_join(const std::string& mount, const std::string& root, const std::string& self) {
  std::string rel = self;
  if (root != "/" && rel.rfind(root, 0) == 0) rel = rel.substr(root.size());
  if (rel == "/") rel.clear();
  return mount + rel;
}

template <class F>
void cg_each_child(const char* dir, F&& f) {
  DIR* d = ::opendir(dir);
  if (!d) return;
  while (dirent* e = ::readdir(d)) {
    if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
    char child[4096];
    std::snprintf(child, sizeof child, "%s/%s", dir, e->d_name);
    f(child);
  }
  ::closedir(d);
}

void cg_collect_pids(const std::string& dir, std::vector<int>& out) {
  std::stringstream ss(cg_read(dir + "/cgroup.procs"));
  int pid;
  while (ss >> pid) out.push_back(pid);
  cg_each_child(dir.c_str(), [&](const char* c) { cg_collect_pids(c, out); });
}

CgroupLayout probe_layout() {
  CgroupLayout layout;
  // /proc/self/cgroup: "id:controllers:path"; v2 is "0::path".
  std::map<std::string, std::string> self_v1;  // controller -> path
  std::string self_v2;
  bool have_v2_line = false;
  {
    std::stringstream ss(cg_read("/proc/self/cgroup"));
    std::string line;
    while (std::getline(ss, line)) {
      auto c1 = line.find(':'), c2 = line.find(':', c1 + 1);
      if (c1 == std::string::npos || c2 == std::string::npos) continue;
      std::string ctrls = line.substr(c1 + 1, c2 - c1 - 1), path = line.substr(c2 + 1);
      if (ctrls.empty()) {
        self_v2 = path;
        have_v2_line = true;
      } else {
        for (const auto& c : cg_split(ctrls, ',')) self_v1[c] = path;
      }
    }
  }
  // /proc/self/mountinfo: "id parent maj:min root mountpoint opts ... - fstype source superopts".
  struct Mount {
    std::string root, point, fstype;
    std::vector<std::string> opts;
  };
  std::vector<Mount> mounts;
  {
    std::stringstream ss(cg_read("/proc/self/mountinfo"));
    std::string line;
    while (std::getline(ss, line)) {
      auto dash = line.find(" - ");
      if (dash == std::string::npos) continue;
      auto pre = cg_split(line.substr(0, dash), ' ');
      auto post = cg_split(line.substr(dash + 3), ' ');
      if (pre.size() < 5 || post.size() < 3) continue;
      if (post[0] != "cgroup" && post[0] != "cgroup2") continue;
      mounts.push_back({pre[3], pre[4], post[0], cg_split(post[2], ',')});
    }
  }
  auto has = [](const std::vector<std::string>& v, const std::string& x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  bool used_v1 = false, used_v2 = false;
  auto want = {"memory", "pids", "cpu", "freezer"};
  std::map<std::string, bool> found;
  for (const auto& m : mounts) {
    if (m.fstype != "cgroup") continue;
    CgroupLayout::Hierarchy h;
    for (const char* c : want)
      if (has(m.opts, c) && !found[c] && self_v1.count(c)) {
        if (std::string(c) == "memory") h.memory = true;
        if (std::string(c) == "pids") h.pids = true;
        if (std::string(c) == "cpu") h.cpu = true;
        if (std::string(c) == "freezer") h.freezer = true;
        found[c] = true;
      }
    if (!(h.memory || h.pids || h.cpu || h.freezer)) continue;
    std::string ctrl = h.memory ? "memory" : h.pids ? "pids" : h.cpu ? "cpu" : "freezer";
    h.dir = cg_join(m.point, m.root, self_v1[ctrl]);
    layout.hierarchies.push_back(h);
    used_v1 = true;
  }
  for (const auto& m : mounts) {
    if (m.fstype != "cgroup2" || !have_v2_line) continue;
    CgroupLayout::Hierarchy h;
    h.v2 = true;
    h.dir = cg_join(m.point, m.root, self_v2);
    auto ctrls = cg_split(cg_read(h.dir + "/cgroup.controllers"), ' ');
    for (auto& c : ctrls)
      if (!c.empty() && c.back() == '\n') c.pop_back();
    if (has(ctrls, "memory") && !found["memory"]) h.memory = found["memory"] = true;
    if (has(ctrls, "pids") && !found["pids"]) h.pids = found["pids"] = true;
    if (has(ctrls, "cpu") && !found["cpu"]) h.cpu = found["cpu"] = true;
    // v2 freezes any group through cgroup.freeze; used when no v1 freezer exists and the
    // unified tree also holds the limits (a freezer on a tree that holds none of the sandbox's
    // controllers would still work, but keep one place per sandbox where possible).
    if (!found["freezer"] && cg_exists(h.dir + "/cgroup.freeze")) h.freezer = found["freezer"] = true;
    if (h.memory || h.pids || h.cpu || h.freezer) {
      layout.hierarchies.push_back(h);
      used_v2 = true;
    }
    break;
  }
  std::string missing;
  for (const char* c : {"memory", "pids", "freezer"})
    if (!found[c]) missing += std::string(missing.empty() ? "" : ", ") + c;
  if (!missing.empty()) {
    layout.problem = "no usable cgroup controller for: " + missing +
                     " (sandboxes need memory and pids limits and a freezer; see /proc/self/cgroup)";
    return layout;
  }
  for (const auto& h : layout.hierarchies) {
    if (::access(h.dir.c_str(), W_OK) != 0) {
      layout.problem = "cgroup folder " + h.dir + " is not writable (" + std::strerror(errno) +
                       "): sandboxes need a delegated cgroup, e.g. run as root";
      return layout;
    }
  }
  layout.version = used_v1 && used_v2 ? "hybrid" : used_v2 ? "v2" : "v1";
  layout.ok = true;
  return layout;
}

// On v2, controllers reach a child group only when every ancestor below the process's own group
// enables them in cgroup.subtree_control, and a group with processes cannot enable them: the
// process's own group is emptied into a leaf ("k3-self") first when needed.
void v2_enable_controllers(const CgroupLayout::Hierarchy& h, const std::string& dir) {
  std::string want;
  if (h.memory) want += "+memory ";
  if (h.pids) want += "+pids ";
  if (h.cpu) want += "+cpu ";
  if (want.empty()) return;
  int err = 0;
  if (cg_try_write(dir + "/cgroup.subtree_control", want, &err)) return;
  if (err == EBUSY && dir == h.dir) {
    const std::string self_leaf = h.dir + "/k3-self";
    cg_mkdirs(self_leaf);
    std::stringstream ss(cg_read(h.dir + "/cgroup.procs"));
    int pid;
    while (ss >> pid) cg_try_write(self_leaf + "/cgroup.procs", std::to_string(pid));
    if (cg_try_write(dir + "/cgroup.subtree_control", want, &err)) return;
  }
  fail("cgroup: cannot enable ", want, "in ", dir, "/cgroup.subtree_control: ", std::strerror(err));
}

}  // namespace

const CgroupLayout& cgroup_layout() {
  static const CgroupLayout layout = probe_layout();
  return layout;
}

CgroupTree::CgroupTree(const std::string& relative) : relative_(relative) {
  const CgroupLayout& layout = cgroup_layout();
  K3_CHECK(layout.ok, "cgroups: ", layout.problem);
  for (const auto& h : layout.hierarchies) {
    if (h.v2) {
      // Enable the controllers on every level from the process's group down to this one.
      std::string dir = h.dir;
      v2_enable_controllers(h, dir);
      for (const auto& part : cg_split(relative_, '/')) {
        if (part.empty()) continue;
        dir += "/" + part;
        cg_mkdirs(dir);
        v2_enable_controllers(h, dir);
      }
    } else {
      cg_mkdirs(path(h, ""));
    }
  }
}

CgroupTree::~CgroupTree() = default;

std::string CgroupTree::path(const CgroupLayout::Hierarchy& h, const std::string& leaf) const {
  return h.dir + "/" + relative_ + (leaf.empty() ? "" : "/" + leaf);
}

const CgroupLayout::Hierarchy* CgroupTree::freezer() const {
  for (const auto& h : cgroup_layout().hierarchies)
    if (h.freezer) return &h;
  return nullptr;
}

void CgroupTree::set_limits(const SandboxLimits& limits) {
  for (const auto& h : cgroup_layout().hierarchies) {
    const std::string dir = path(h, "");
    if (h.memory) {
      const std::string bytes = std::to_string(limits.memory_bytes);
      if (h.v2) {
        cg_write(dir + "/memory.max", bytes);
        if (cg_exists(dir + "/memory.swap.max")) cg_write(dir + "/memory.swap.max", "0");
      } else {
        cg_write(dir + "/memory.limit_in_bytes", bytes);
        // memsw (memory + swap) must not be below the memory limit: written after it.
        if (cg_exists(dir + "/memory.memsw.limit_in_bytes")) cg_write(dir + "/memory.memsw.limit_in_bytes", bytes);
      }
    }
    if (h.pids) cg_write(dir + "/pids.max", std::to_string(limits.pids));
    if (h.cpu) {
      if (h.v2) {
        cg_write(dir + "/cpu.weight", std::to_string(limits.cpu_weight));
        if (limits.cpus > 0)
          cg_write(dir + "/cpu.max", std::to_string(static_cast<int64_t>(limits.cpus * 100000)) + " 100000");
      } else {
        // cpu.weight 100 is v1's default share of 1024.
        cg_write(dir + "/cpu.shares", std::to_string(std::max<int64_t>(2, int64_t{limits.cpu_weight} * 1024 / 100)));
        if (limits.cpus > 0) {
          cg_write(dir + "/cpu.cfs_period_us", "100000");
          cg_write(dir + "/cpu.cfs_quota_us", std::to_string(static_cast<int64_t>(limits.cpus * 100000)));
        }
      }
    }
  }
}

std::vector<std::string> CgroupTree::leaf_procs_files(const std::string& leaf) {
  std::vector<std::string> files;
  for (const auto& h : cgroup_layout().hierarchies) {
    const std::string dir = path(h, leaf);
    cg_mkdirs(dir);
    files.push_back(dir + "/cgroup.procs");
  }
  return files;
}

static bool cg_wait_frozen(const CgroupLayout::Hierarchy& h, const std::string& dir, bool frozen) {
  for (int i = 0; i < 4000; ++i) {
    if (h.v2) {
      const std::string events = cg_read(dir + "/cgroup.events");
      if (events.find(frozen ? "frozen 1" : "frozen 0") != std::string::npos) return true;
    } else {
      const std::string state = cg_read(dir + "/freezer.state");
      if (state.rfind(frozen ? "FROZEN" : "THAWED", 0) == 0) return true;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  return false;
}

void CgroupTree::freeze(const std::string& leaf) {
  const auto* h = freezer();
  const std::string dir = path(*h, leaf);
  if (h->v2) cg_write(dir + "/cgroup.freeze", "1");
  else cg_write(dir + "/freezer.state", "FROZEN");
  K3_CHECK(cg_wait_frozen(*h, dir, true), "cgroup: ", dir, " did not freeze within 2 s");
}

void CgroupTree::thaw(const std::string& leaf, bool wait) {
  const auto* h = freezer();
  const std::string dir = path(*h, leaf);
  if (h->v2) cg_write(dir + "/cgroup.freeze", "0");
  else cg_write(dir + "/freezer.state", "THAWED");
  if (wait) cg_wait_frozen(*h, dir, false);
}

bool CgroupTree::frozen(const std::string& leaf) const {
  const auto* h = freezer();
  const std::string dir = path(*h, leaf);
  if (h->v2) return cg_read(dir + "/cgroup.events").find("frozen 1") != std::string::npos;
  const std::string state = cg_read(dir + "/freezer.state");
  return state.rfind("FROZEN", 0) == 0 || state.rfind("FREEZING", 0) == 0;
}

std::vector<int> CgroupTree::pids(const std::string& leaf) const {
  std::vector<int> out;
  const auto* h = freezer();
  if (cg_exists(path(*h, leaf))) cg_collect_pids(path(*h, leaf), out);
  return out;
}

void CgroupTree::kill_all(const std::string& leaf) {
  const auto* h = freezer();
  const std::string dir = path(*h, leaf);
  if (!cg_exists(dir)) return;
  // Frozen first, so nothing forks between reading the list and the signals.  A v1-frozen
  // process dies only once thawed, hence the thaw after the signals.  Within a paused sandbox
  // the leaf is frozen already and stays so until the sandbox thaws: the signals wait there.
  const bool sandbox_paused = !leaf.empty() && frozen("");
  bool was_frozen = false;
  try {
    freeze(leaf);
    was_frozen = true;
  } catch (const Error&) {
  }
  // By pidfd, and only while the pid is still in the group: a pid read from the list may belong
  // to a host process by the time it is signalled, once its sandbox process has been reaped.
  auto kill_members = [&] {
    const std::vector<int> listed = pids(leaf);
    for (int pid : listed) {
      const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
      if (fd < 0) continue;
      const std::vector<int> now = pids(leaf);
      if (std::find(now.begin(), now.end(), pid) != now.end()) ::syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0);
      ::close(fd);
    }
  };
  kill_members();
  if (was_frozen || !h->v2) thaw(leaf, /*wait=*/!sandbox_paused);
  if (sandbox_paused) return;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!pids(leaf).empty() && std::chrono::steady_clock::now() < give_up) {
    kill_members();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// v1 counts a kill in the victim's own group only (here a command's leaf), v2 in every ancestor
// too: v1 sums the tree.
static uint64_t cg_oom_kills_v1(const std::string& dir) {
  const std::string text = cg_read(dir + "/memory.oom_control");
  auto at = text.find("oom_kill ");
  uint64_t n = at == std::string::npos ? 0 : std::strtoull(text.c_str() + at + 9, nullptr, 10);
  cg_each_child(dir.c_str(), [&](const char* c) { n += cg_oom_kills_v1(c); });
  return n;
}

uint64_t CgroupTree::oom_kills() const {
  for (const auto& h : cgroup_layout().hierarchies) {
    if (!h.memory) continue;
    if (!h.v2) return cg_oom_kills_v1(path(h, ""));
    const std::string text = cg_read(path(h, "") + "/memory.events");
    auto at = text.find("oom_kill ");
    return at == std::string::npos ? 0 : std::strtoull(text.c_str() + at + 9, nullptr, 10);
  }
  return 0;
}

void CgroupTree::remove(const std::string& leaf) {
  kill_all(leaf);
  std::vector<std::string> dirs;
  for (const auto& h : cgroup_layout().hierarchies) dirs.push_back(path(h, leaf));
  kill_and_remove_trees(dirs);
}

std::vector<std::string> CgroupTree::dirs_of(const std::string& relative) {
  std::vector<std::string> dirs;
  for (const auto& h : cgroup_layout().hierarchies) dirs.push_back(h.dir + "/" + relative);
  return dirs;
}

// Plain system calls and fixed buffers (besides opendir) only: the guardian runs this in a
// forked child.  Three passes, each over every hierarchy before the next (a process frozen in
// the freezer hierarchy cannot leave the memory one): SIGKILL every process; thaw from the top
// (a v1 group stays frozen while its parent is, and a frozen process dies only once thawed);
// then, from the leaves up, wait for the groups to empty and delete them.
namespace {

int cg_kill_procs(const char* dir) {
  char path[4096];
  std::snprintf(path, sizeof path, "%s/cgroup.procs", dir);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[8192];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  int killed = 0;
  for (char* p = buf; *p;) {
    long pid = std::strtol(p, &p, 10);
    if (pid > 0) {
      ::kill(static_cast<pid_t>(pid), SIGKILL);
      ++killed;
    }
    while (*p == '\n') ++p;
  }
  return killed;
}

void cg_kill_pass(const char* dir) {
  cg_kill_procs(dir);
  cg_each_child(dir, [](const char* c) { cg_kill_pass(c); });
}

void cg_thaw_pass(const char* dir) {
  char path[4096];
  std::snprintf(path, sizeof path, "%s/freezer.state", dir);
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    (void)!::write(fd, "THAWED", 6);
    ::close(fd);
  }
  std::snprintf(path, sizeof path, "%s/cgroup.freeze", dir);
  fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    (void)!::write(fd, "0", 1);
    ::close(fd);
  }
  cg_each_child(dir, [](const char* c) { cg_thaw_pass(c); });
}

void cg_remove_pass(const char* dir) {
  cg_each_child(dir, [](const char* c) { cg_remove_pass(c); });
  for (int i = 0; i < 2000 && cg_kill_procs(dir) > 0; ++i) ::usleep(1000);
  for (int i = 0; i < 1000 && ::rmdir(dir) != 0 && errno == EBUSY; ++i) ::usleep(1000);
}

}  // namespace

void CgroupTree::kill_and_remove_trees(const std::vector<std::string>& dirs) {
  for (const auto& d : dirs) cg_kill_pass(d.c_str());
  for (const auto& d : dirs) cg_thaw_pass(d.c_str());
  for (const auto& d : dirs) cg_remove_pass(d.c_str());
}

}  // namespace k3::agentenv
