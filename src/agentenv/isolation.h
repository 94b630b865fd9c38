// The system-call side of a sandbox: starting its PID 1 inside new namespaces over an assembled
// root, and starting a command inside those namespaces.  Everything a child process needs is
// prepared here in the parent (paths, fds, the seccomp program), so that between fork and exec the
// children make plain system calls only.
//
// PID 1 (spawn_init): cloned with new mount, PID, IPC, UTS and network namespaces; joins the
// sandbox's "init" cgroup; mounts the root overlay, the read-only host folders, /proc, a small
// /dev; pivots into the root; brings loopback up when asked; then unshares a user namespace whose
// uid/gid 0..65535 map to the sandbox's host range, and reaps orphans until killed.  It dies with
// the thread that started it (parent-death signal), which is why spawn_init runs on one
// long-lived thread.
//
// A command (spawn_command): a helper process joins PID 1's namespaces (user last) and forks the
// command, which joins the command's cgroup leaf, becomes the sandbox's root (uid 0 inside, the
// range's first uid outside), drops every capability (bounding set, securebits, no new
// privileges), loads the seccomp filter and execs /bin/sh -c.  The helper reports the command's
// wait status on a pipe.
#pragma once

#include <string>
#include <vector>

namespace k3::agentenv {

struct InitConfig {
  std::string root;          // where the root is assembled (a host folder)
  std::string overlay_opts;  // "lowerdir=…,upperdir=…,workdir=…" for the root overlay
  // Host folders bound read-only at the same path inside (e.g. /usr, /etc).
  std::vector<std::string> ro_binds;
  std::vector<std::string> cgroup_procs;  // the init leaf's cgroup.procs files
  bool loopback = false;
  unsigned uid_base = 0;  // host uid (and gid) of the sandbox's root; 65536 ids from it
  std::string hostname = "sandbox";
};

// Starts PID 1 and returns its host pid once the sandbox is ready; throws k3::Error with the
// child's own account of what failed (e.g. "mount overlay on …: Invalid argument").
int spawn_init(const InitConfig& config);

struct CommandConfig {
  int init_pid = -1;
  std::vector<std::string> cgroup_procs;  // the command leaf's cgroup.procs files
  std::string cwd;
  std::string command;  // for /bin/sh -c
  std::vector<std::string> env;  // "NAME=value"
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;  // the child's ends
  int status_fd = -1;  // the helper writes the command's wait status (an int) here
};

// Forks the helper and returns its host pid (the caller waits for it).  Throws k3::Error when
// PID 1's namespaces cannot be opened (it has died).
int spawn_command(const CommandConfig& config);

// The host folders a sandbox without a template sees read-only: /usr, /etc, and /bin, /sbin,
// /lib… where they are folders (on a merged-/usr system they are symlinks into /usr, which the
// sandbox's root repeats instead; sandbox_manager.cpp builds that root).
std::vector<std::string> host_system_dirs();

// Whether this process can make sandboxes: "" if so, else why not.
std::string isolation_problem();

}  // namespace k3::agentenv
