// Sandbox file access from the host: every path is resolved by openat2() with the sandbox's root
// as the root (RESOLVE_IN_ROOT: "..", absolute paths and absolute symlinks stay inside; no
// /proc magic links), on a thread whose file-system identity is the sandbox's root user (so the
// kernel applies the same permissions as inside), and only on the sandbox's own file systems:
// a path that ends on /proc, /sys and the like is refused, since the host's root could write
// there through them.
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "agentenv/sandbox.h"

namespace k3::agentenv {
namespace {

// The calling thread's file-system uid/gid for the scope, and no supplementary groups (the
// host root's group 0 would open files the sandbox's root cannot).  setfsuid is per thread; so is
// the raw setgroups system call (glibc's setgroups() would change every thread).
class FsIdentity {
 public:
  explicit FsIdentity(uint32_t id) {
    const int n = ::getgroups(0, nullptr);
    if (n > 0) {
      groups_.resize(static_cast<size_t>(n));
      groups_.resize(static_cast<size_t>(std::max(0, ::getgroups(n, groups_.data()))));
    }
    K3_CHECK(::syscall(SYS_setgroups, 0, nullptr) == 0, "file access: cannot drop supplementary groups: ",
             std::strerror(errno));
    old_uid_ = ::setfsuid(id);
    old_gid_ = ::setfsgid(id);
  }
  ~FsIdentity() {
    ::setfsgid(old_gid_);
    ::setfsuid(old_uid_);
    ::syscall(SYS_setgroups, groups_.size(), groups_.data());
  }
  FsIdentity(const FsIdentity&) = delete;
  FsIdentity& operator=(const FsIdentity&) = delete;

 private:
  std::vector<gid_t> groups_;
  int old_uid_, old_gid_;
};

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }

 private:
  int fd_;
};

std::string fs_inside(const std::string& path) {
  K3_CHECK(!path.empty(), "path: empty");
  K3_CHECK(path.find('\0') == std::string::npos, "path: contains a NUL byte");
  K3_CHECK(path.size() < 4096, "path: longer than 4095 bytes");
  return path[0] == '/' ? path : "/workspace/" + path;
}

[[noreturn]] void fs_fail(const std::string& path, int err) {
  if (err == ENOENT) throw NotFound(cat("no such file or folder in the sandbox: ", path));
  if (err == EXDEV || err == ELOOP) fail(path, ": the path leaves the sandbox or loops through symlinks");
  fail(path, ": ", std::strerror(err));
}

int fs_open(int root, const std::string& path, uint64_t flags, uint64_t mode = 0) {
  open_how how{};
  how.flags = flags | O_CLOEXEC;
  how.mode = mode;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  for (;;) {
    long fd = ::syscall(SYS_openat2, root, path.c_str(), &how, sizeof how);
    if (fd >= 0) return static_cast<int>(fd);
    if (errno != EAGAIN && errno != EINTR) return -1;
  }
}

// Pseudo file systems the host's root could change the host through (or read it from).
void fs_check_own(int fd, const std::string& path) {
  struct statfs sf;
  K3_CHECK(::fstatfs(fd, &sf) == 0, path, ": ", std::strerror(errno));
  switch (static_cast<unsigned long>(sf.f_type)) {
    case PROC_SUPER_MAGIC:
    case SYSFS_MAGIC:
    case CGROUP_SUPER_MAGIC:
    case CGROUP2_SUPER_MAGIC:
    case DEBUGFS_MAGIC:
    case TRACEFS_MAGIC:
    case SECURITYFS_MAGIC:
    case BPF_FS_MAGIC:
    case DEVPTS_SUPER_MAGIC:
    case PSTOREFS_MAGIC:
    case EFIVARFS_MAGIC:
      fail(path, ": the file API reaches only the sandbox's files (not /proc, /sys or /dev/pts); use a command");
    default:
      break;
  }
}

DirEntry fs_entry(const std::string& name, const struct stat& st) {
  DirEntry e;
  e.name = name;
  e.type = S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "dir" : S_ISLNK(st.st_mode) ? "symlink" : "other";
  e.size = static_cast<uint64_t>(st.st_size);
  e.mode = st.st_mode & 07777;
  e.mtime = st.st_mtim.tv_sec;
  return e;
}

}  // namespace

std::string Sandbox::read_file(const std::string& path_in, const FileLimits& limits) const {
  const std::string path = fs_inside(path_in);
  Fd root(open_root());
  FsIdentity as(uid_base_);
  Fd fd(fs_open(root.get(), path, O_RDONLY | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) fs_fail(path, errno);
  fs_check_own(fd.get(), path);
  struct stat st;
  K3_CHECK(::fstat(fd.get(), &st) == 0, path, ": ", std::strerror(errno));
  K3_CHECK(!S_ISDIR(st.st_mode), path, ": is a folder, not a file");
  K3_CHECK(S_ISREG(st.st_mode), path, ": not a regular file");
  K3_CHECK(static_cast<uint64_t>(st.st_size) <= limits.max_read, path, ": ", st.st_size,
           " bytes, more than the limit of ", limits.max_read);
  std::string data;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    K3_CHECK(n >= 0, path, ": ", std::strerror(errno));
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
    K3_CHECK(data.size() <= limits.max_read, path, ": grew past the limit of ", limits.max_read, " bytes while read");
  }
  return data;
}

void Sandbox::write_file(const std::string& path_in, std::string_view data, bool append, const FileLimits& limits) {
  const std::string path = fs_inside(path_in);
  K3_CHECK(data.size() <= limits.max_write, path, ": ", data.size(), " bytes, more than the limit of ", limits.max_write);
  K3_CHECK(path.back() != '/', path, ": names a folder, not a file");
  Fd root(open_root());
  FsIdentity as(uid_base_);
  // Missing parents, one level at a time, each resolved inside the root.
  for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    const std::string dir = path.substr(0, slash);
    Fd d(fs_open(root.get(), dir, O_PATH | O_DIRECTORY));
    if (d.get() >= 0) continue;
    if (errno != ENOENT) fs_fail(dir, errno);
    const size_t parent_end = dir.rfind('/');
    const std::string parent = parent_end == 0 ? "/" : dir.substr(0, parent_end);
    Fd p(fs_open(root.get(), parent, O_PATH | O_DIRECTORY));
    if (p.get() < 0) fs_fail(parent, errno);
    if (::mkdirat(p.get(), dir.substr(parent_end + 1).c_str(), 0755) != 0 && errno != EEXIST) fs_fail(dir, errno);
  }
  Fd fd(fs_open(root.get(), path, O_WRONLY | O_CREAT | O_NONBLOCK | O_NOCTTY | (append ? O_APPEND : O_TRUNC), 0644));
  if (fd.get() < 0) fs_fail(path, errno);
  fs_check_own(fd.get(), path);
  struct stat st;
  K3_CHECK(::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode), path, ": not a regular file");
  size_t at = 0;
  while (at < data.size()) {
    ssize_t n = ::write(fd.get(), data.data() + at, data.size() - at);
    if (n < 0 && errno == EINTR) continue;
    K3_CHECK(n > 0, path, ": ", std::strerror(errno));
    at += static_cast<size_t>(n);
  }
}

std::vector<DirEntry> Sandbox::list_dir(const std::string& path_in) const {
  const std::string path = fs_inside(path_in);
  Fd root(open_root());
  FsIdentity as(uid_base_);
  Fd fd(fs_open(root.get(), path, O_RDONLY | O_DIRECTORY));
  if (fd.get() < 0) {
    if (errno == ENOTDIR) fail(path, ": is a file, not a folder");
    fs_fail(path, errno);
  }
  fs_check_own(fd.get(), path);
  DIR* d = ::fdopendir(fd.get());
  K3_CHECK(d != nullptr, path, ": ", std::strerror(errno));
  fd.release();
  std::vector<DirEntry> entries;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    struct stat st;
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    entries.push_back(fs_entry(e->d_name, st));
  }
  ::closedir(d);
  std::sort(entries.begin(), entries.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  return entries;
}

DirEntry Sandbox::stat(const std::string& path_in) const {
  const std::string path = fs_inside(path_in);
  Fd root(open_root());
  FsIdentity as(uid_base_);
  Fd fd(fs_open(root.get(), path, O_PATH | O_NOFOLLOW));
  if (fd.get() < 0) fs_fail(path, errno);
  struct stat st;
  K3_CHECK(::fstat(fd.get(), &st) == 0, path, ": ", std::strerror(errno));
  const size_t slash = path.find_last_of('/');
  return fs_entry(slash == std::string::npos ? path : path.substr(slash + 1), st);
}

}  // namespace k3::agentenv
