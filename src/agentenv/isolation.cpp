#include "agentenv/isolation.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/securebits.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "base/error.h"
#include "base/serial_worker.h"

namespace k3::agentenv {
namespace {

// ---- the seccomp program, built once ---------------------------------------------------------

// System calls a sandbox never needs and that widen the kernel's attack surface or reach outside
// the sandbox (mounting, tracing, kernel modules, keyrings, clocks, BPF, io_uring, new user
// namespaces).  They fail with EPERM.  Only the native x86-64 / arm64 ABI is allowed: a call
// through another ABI (e.g. int 0x80) kills the process (libseccomp's bad-architecture action).
struct SeccompProgram {
  std::vector<sock_filter> filter;
  std::string problem;
};

SeccompProgram build_seccomp() {
  SeccompProgram out;
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) {
    out.problem = "seccomp_init failed";
    return out;
  }
  const int deny = SCMP_ACT_ERRNO(EPERM);
  const char* names[] = {
      "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsmount",
      "fsconfig", "fspick", "mount_setattr", "ptrace", "process_vm_readv", "process_vm_writev",
      "bpf", "perf_event_open", "kexec_load", "kexec_file_load", "init_module", "finit_module",
      "delete_module", "keyctl", "add_key", "request_key", "reboot", "swapon", "swapoff",
      "clock_settime", "clock_adjtime", "settimeofday", "adjtimex", "userfaultfd", "io_uring_setup",
      "io_uring_enter", "io_uring_register", "setns", "open_by_handle_at", "name_to_handle_at",
      "acct", "quotactl", "syslog", "vhangup", "lookup_dcookie", "iopl", "ioperm", "uselib",
      "personality", "nfsservctl", "sethostname", "setdomainname", "fanotify_init", "memfd_secret"};
  for (const char* name : names) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    if (seccomp_rule_add(ctx, deny, nr, 0) != 0) {
      out.problem = std::string("seccomp rule for ") + name + " failed";
      seccomp_release(ctx);
      return out;
    }
  }
  // New user namespaces through unshare() or clone(); clone3 passes its flags in memory that a
  // filter cannot read, so it reports ENOSYS and the C library falls back to clone.
  seccomp_rule_add(ctx, deny, SCMP_SYS(unshare), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER));
  seccomp_rule_add(ctx, deny, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER));
  seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  // Terminal injection into the caller's terminal.
  seccomp_rule_add(ctx, deny, SCMP_SYS(ioctl), 1, SCMP_A1(SCMP_CMP_EQ, TIOCSTI));
  int fd = memfd_create("k3-seccomp", MFD_CLOEXEC);
  if (fd < 0 || seccomp_export_bpf(ctx, fd) != 0) {
    out.problem = "seccomp_export_bpf failed";
    if (fd >= 0) ::close(fd);
    seccomp_release(ctx);
    return out;
  }
  seccomp_release(ctx);
  off_t size = ::lseek(fd, 0, SEEK_END);
  out.filter.resize(static_cast<size_t>(size) / sizeof(sock_filter));
  if (::pread(fd, out.filter.data(), static_cast<size_t>(size), 0) != size) out.problem = "reading the seccomp program failed";
  ::close(fd);
  return out;
}

const SeccompProgram& seccomp_program() {
  static const SeccompProgram program = build_seccomp();
  return program;
}

// ---- helpers for the children: system calls and fixed buffers only -------------------------

// Reports "what: strerror(errno)" on fd and exits.
[[noreturn]] void iso_die(int fd, const char* what, const char* arg = nullptr) {
  char buf[512];
  int e = errno;
  int n = std::snprintf(buf, sizeof buf, "E%s%s%s: %s", what, arg ? " " : "", arg ? arg : "", std::strerror(e));
  if (fd >= 0) (void)!::write(fd, buf, static_cast<size_t>(n));
  ::_exit(1);
}

bool iso_write_fd(int fd, const char* text) {
  size_t n = std::strlen(text);
  return ::write(fd, text, n) == static_cast<ssize_t>(n);
}

bool iso_write_file(const char* path, const char* text) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = iso_write_fd(fd, text);
  ::close(fd);
  return ok;
}

// No capabilities, now or after exec, and none to regain: the sandbox's root is an ordinary user.
bool iso_drop_capabilities() {
  if (::prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                                     SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                                     SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) != 0)
    return false;
  for (int cap = 0; cap <= 63; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return false;
  }
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  return ::syscall(SYS_capset, &header, data) == 0;
}

// Where the kernel shows this process's command line and environment from (/proc/PID/cmdline,
// /proc/PID/environ): fields 48-51 of /proc/self/stat.  PID 1 is a copy of the server that never
// execs, so it blanks its copy of them: a server started with --api-key must not show the key to
// the sandbox's `ps`.
struct ArgArea {
  uintptr_t arg_start = 0, arg_end = 0, env_start = 0, env_end = 0;
};

ArgArea read_arg_area() {
  ArgArea a;
  FILE* f = std::fopen("/proc/self/stat", "re");
  if (!f) return a;
  char buf[2048];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');
  if (!p) return a;
  // After ") " comes field 3; fields 48..51 follow.
  unsigned long long v[52] = {};
  int field = 3;
  for (const char* q = p + 2; *q && field <= 51; ++field) {
    char* end;
    v[field] = std::strtoull(q, &end, 10);
    if (end == q) {  // a non-numeric field (the state letter)
      while (*q && *q != ' ') ++q;
    } else {
      q = end;
    }
    while (*q == ' ') ++q;
  }
  if (field > 51) a = {v[48], v[49], v[50], v[51]};
  return a;
}

struct InitArgs {
  ArgArea area;
  const InitConfig* config;
  int to_parent;   // write end: "R" (ready for the id maps), "K" (running) or "E<message>"
  int from_parent; // read end: one byte once the id maps are written
  char root_proc[4096], root_dev[4096];
};

void iso_mount_dev(const char* dev, int err_fd) {
  if (::mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=1m") != 0) iso_die(err_fd, "mount tmpfs on", dev);
  const char* nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
  char target[8192], source[64];
  for (const char* node : nodes) {
    std::snprintf(target, sizeof target, "%s/%s", dev, node);
    std::snprintf(source, sizeof source, "/dev/%s", node);
    int fd = ::open(target, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0) iso_die(err_fd, "create", target);
    ::close(fd);
    if (::mount(source, target, nullptr, MS_BIND, nullptr) != 0) iso_die(err_fd, "bind", source);
  }
  const char* links[][2] = {{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
                            {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}};
  for (const auto& l : links) {
    std::snprintf(target, sizeof target, "%s/%s", dev, l[1]);
    if (::symlink(l[0], target) != 0) iso_die(err_fd, "symlink", target);
  }
  std::snprintf(target, sizeof target, "%s/shm", dev);
  if (::mkdir(target, 01777) != 0) iso_die(err_fd, "mkdir", target);
  if (::mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m") != 0) iso_die(err_fd, "mount tmpfs on", target);
}

int init_main(void* raw) {
  InitArgs* a = static_cast<InitArgs*>(raw);
  const InitConfig& c = *a->config;
  const int err = a->to_parent;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::prctl(PR_SET_NAME, "k3-sandbox-init");
  if (a->area.arg_end > a->area.arg_start) {
    char* args = reinterpret_cast<char*>(a->area.arg_start);
    const size_t len = a->area.arg_end - a->area.arg_start;
    std::memset(args, 0, len);
    std::strncpy(args, "k3-sandbox-init", len - 1);
  }
  if (a->area.env_end > a->area.env_start)
    std::memset(reinterpret_cast<char*>(a->area.env_start), 0, a->area.env_end - a->area.env_start);
  for (const auto& f : c.cgroup_procs)
    if (!iso_write_file(f.c_str(), "0")) iso_die(err, "join cgroup", f.c_str());
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) iso_die(err, "make mounts private");
  if (::mount("overlay", c.root.c_str(), "overlay", MS_NOSUID | MS_NODEV, c.overlay_opts.c_str()) != 0)
    iso_die(err, "mount overlay on", c.root.c_str());
  char target[4096];
  for (const auto& dir : c.ro_binds) {
    std::snprintf(target, sizeof target, "%s%s", c.root.c_str(), dir.c_str());
    if (::mount(dir.c_str(), target, nullptr, MS_BIND | MS_REC, nullptr) != 0) iso_die(err, "bind", dir.c_str());
    if (::mount(nullptr, target, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0)
      iso_die(err, "make read-only", target);
  }
  if (::mount("proc", a->root_proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) iso_die(err, "mount proc on", a->root_proc);
  iso_mount_dev(a->root_dev, err);
  if (::chdir(c.root.c_str()) != 0) iso_die(err, "chdir", c.root.c_str());
  if (::syscall(SYS_pivot_root, ".", ".") != 0) iso_die(err, "pivot_root");
  if (::umount2(".", MNT_DETACH) != 0) iso_die(err, "detach the host root");
  if (::chdir("/") != 0) iso_die(err, "chdir /");
  if (::sethostname(c.hostname.c_str(), c.hostname.size()) != 0) iso_die(err, "sethostname");
  if (c.loopback) {
    int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    if (s < 0 || ::ioctl(s, SIOCGIFFLAGS, &ifr) != 0) iso_die(err, "read loopback flags");
    ifr.ifr_flags |= IFF_UP;
    if (::ioctl(s, SIOCSIFFLAGS, &ifr) != 0) iso_die(err, "bring loopback up");
    ::close(s);
  }
  if (::unshare(CLONE_NEWUSER) != 0) iso_die(err, "unshare the user namespace");
  if (!iso_write_fd(err, "R")) ::_exit(1);
  char go;
  if (::read(a->from_parent, &go, 1) != 1) ::_exit(1);
  iso_drop_capabilities();
  if (!iso_write_fd(err, "K")) ::_exit(1);
  // Nothing of the server stays open in PID 1 (other commands' pipes among them).
  ::syscall(SYS_close_range, 0, ~0U, 0);
  // The reaper: every orphan of the sandbox becomes PID 1's child.
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, nullptr);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  for (;;) {
    while (::waitpid(-1, nullptr, WNOHANG | __WALL) > 0) {
    }
    siginfo_t info;
    sigwaitinfo(&chld, &info);
  }
}

// The thread PID 1s are started from: their parent-death signal follows this thread.
SerialWorker& spawner() {
  static SerialWorker worker;
  return worker;
}

std::string read_report(int fd, char expect) {
  char buf[600];
  ssize_t n = ::read(fd, buf, 1);
  if (n == 1 && buf[0] == expect) return "";
  if (n == 1 && buf[0] == 'E') {
    ssize_t m = ::read(fd, buf + 1, sizeof buf - 2);
    return std::string(buf + 1, m > 0 ? static_cast<size_t>(m) : 0);
  }
  return "the sandbox's PID 1 exited during start-up";
}

}  // namespace

int spawn_init(const InitConfig& config) {
  const SeccompProgram& program = seccomp_program();
  K3_CHECK(program.problem.empty(), "seccomp: ", program.problem);
  return spawner().call([&]() -> int {
    int up[2], down[2];
    K3_CHECK(::pipe2(up, O_CLOEXEC) == 0 && ::pipe2(down, O_CLOEXEC) == 0, "pipe: ", std::strerror(errno));
    static const ArgArea area = read_arg_area();
    auto args = std::make_unique<InitArgs>();
    args->area = area;
    args->config = &config;
    args->to_parent = up[1];
    args->from_parent = down[0];
    std::snprintf(args->root_proc, sizeof args->root_proc, "%s/proc", config.root.c_str());
    std::snprintf(args->root_dev, sizeof args->root_dev, "%s/dev", config.root.c_str());
    constexpr size_t kStack = 256 << 10;
    void* stack = ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    K3_CHECK(stack != MAP_FAILED, "mmap: ", std::strerror(errno));
    const int flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET | SIGCHLD;
    int pid = ::clone(init_main, static_cast<char*>(stack) + kStack, flags, args.get());
    int clone_errno = errno;
    ::munmap(stack, kStack);  // the child has its own copy of the address space
    ::close(up[1]);
    ::close(down[0]);
    auto cleanup = [&](const std::string& why) {
      ::close(up[0]);
      ::close(down[1]);
      if (pid > 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
      fail("sandbox start: ", why);
    };
    if (pid < 0) cleanup(std::string("clone: ") + std::strerror(clone_errno));
    std::string why = read_report(up[0], 'R');
    if (!why.empty()) cleanup(why);
    char map[128];
    std::snprintf(map, sizeof map, "0 %u 65536\n", config.uid_base);
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/uid_map", pid);
    if (!iso_write_file(path, map)) cleanup(std::string("write ") + path + ": " + std::strerror(errno));
    std::snprintf(path, sizeof path, "/proc/%d/gid_map", pid);
    if (!iso_write_file(path, map)) cleanup(std::string("write ") + path + ": " + std::strerror(errno));
    if (::write(down[1], "G", 1) != 1) cleanup("signal PID 1");
    why = read_report(up[0], 'K');
    if (!why.empty()) cleanup(why);
    ::close(up[0]);
    ::close(down[1]);
    return pid;
  });
}

int spawn_command(const CommandConfig& c) {
  const SeccompProgram& program = seccomp_program();
  K3_CHECK(program.problem.empty(), "seccomp: ", program.problem);
  // Namespaces, user last: the others belong to the host's user namespace and can only be
  // joined while still the host's root.
  const char* kinds[] = {"ipc", "uts", "net", "pid", "mnt", "user"};
  int ns[6];
  for (int i = 0; i < 6; ++i) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/ns/%s", c.init_pid, kinds[i]);
    ns[i] = ::open(path, O_RDONLY | O_CLOEXEC);
    if (ns[i] < 0) {
      int e = errno;
      for (int j = 0; j < i; ++j) ::close(ns[j]);
      fail("sandbox PID 1 (pid ", c.init_pid, ") is gone: ", path, ": ", std::strerror(e));
    }
  }
  std::vector<int> cgroup_fds;
  for (const auto& f : c.cgroup_procs) {
    int fd = ::open(f.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      int e = errno;
      for (int x : ns) ::close(x);
      for (int x : cgroup_fds) ::close(x);
      fail("cgroup: cannot open ", f, ": ", std::strerror(e));
    }
    cgroup_fds.push_back(fd);
  }
  // argv and envp, built before fork.
  std::vector<const char*> argv = {"sh", "-c", c.command.c_str(), nullptr};
  std::vector<const char*> envp;
  for (const auto& e : c.env) envp.push_back(e.c_str());
  envp.push_back(nullptr);
  sock_fprog prog{static_cast<unsigned short>(program.filter.size()),
                  const_cast<sock_filter*>(program.filter.data())};
  const char* cwd = c.cwd.c_str();

  pid_t helper = ::fork();
  if (helper < 0) {
    int e = errno;
    for (int x : ns) ::close(x);
    for (int x : cgroup_fds) ::close(x);
    fail("fork: ", std::strerror(e));
  }
  if (helper == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (int i = 0; i < 6; ++i) {
      if (::setns(ns[i], 0) != 0) {
        iso_write_fd(c.stderr_fd, "k3 env: the sandbox's PID 1 ended as the command started\n");
        ::_exit(1);
      }
    }
    pid_t child = ::fork();
    if (child < 0) ::_exit(1);
    if (child == 0) {
      for (int fd : cgroup_fds)
        if (::write(fd, "0", 1) != 1) ::_exit(126);
      ::setsid();
      if (::dup2(c.stdin_fd, 0) < 0 || ::dup2(c.stdout_fd, 1) < 0 || ::dup2(c.stderr_fd, 2) < 0) ::_exit(126);
      ::syscall(SYS_close_range, 3, ~0U, 0);
      if (::setgroups(0, nullptr) != 0 || ::setresgid(0, 0, 0) != 0 || ::setresuid(0, 0, 0) != 0) {
        iso_write_fd(2, "k3 env: cannot become the sandbox's root\n");
        ::_exit(126);
      }
      rlimit core{0, 0};
      ::setrlimit(RLIMIT_CORE, &core);
      if (!iso_drop_capabilities()) {
        iso_write_fd(2, "k3 env: cannot drop capabilities\n");
        ::_exit(126);
      }
      if (::chdir(cwd) != 0) {
        iso_write_fd(2, "k3 env: cannot enter the working folder ");
        iso_write_fd(2, cwd);
        iso_write_fd(2, "\n");
        ::_exit(126);
      }
      if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        iso_write_fd(2, "k3 env: cannot load the seccomp filter\n");
        ::_exit(126);
      }
      ::execve("/bin/sh", const_cast<char* const*>(argv.data()), const_cast<char* const*>(envp.data()));
      iso_write_fd(2, "k3 env: cannot run /bin/sh in the sandbox\n");
      ::_exit(127);
    }
    // The helper keeps only the status pipe, so the output pipes reach EOF with the command
    // (and so do other commands' pipes, started by other threads and inherited at fork).
    if (c.status_fd > 0) ::syscall(SYS_close_range, 0, c.status_fd - 1, 0);
    ::syscall(SYS_close_range, c.status_fd + 1, ~0U, 0);
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    (void)!::write(c.status_fd, &status, sizeof status);
    ::_exit(0);
  }
  for (int x : ns) ::close(x);
  for (int x : cgroup_fds) ::close(x);
  return helper;
}

std::string isolation_problem() {
  if (::geteuid() != 0) return "sandboxes need root (namespaces, overlayfs mounts and cgroups)";
  const SeccompProgram& program = seccomp_program();
  if (!program.problem.empty()) return "seccomp: " + program.problem;
  struct stat st;
  if (::stat("/proc/self/ns/user", &st) != 0) return "this kernel has no user namespaces";
  return "";
}

}  // namespace k3::agentenv
