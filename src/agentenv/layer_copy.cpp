#include "agentenv/layer_copy.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "base/error.h"

namespace k3::agentenv {
namespace {

// Entries are reached through the folder's fd and their own name, never a whole path, so trees
// deeper than PATH_MAX copy too.

uint32_t lc_shift(uint32_t id, uint32_t from_base, uint32_t to_base) {
  return id >= from_base && id - from_base < 65536 ? id - from_base + to_base : id;
}

class LcFd {
 public:
  explicit LcFd(int fd) : fd_(fd) {}
  ~LcFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  LcFd(const LcFd&) = delete;
  LcFd& operator=(const LcFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

[[noreturn]] void lc_fail(const char* what, const std::string& where) {
  fail("fork: cannot ", what, " ", where, ": ", std::strerror(errno));
}

// Extended attributes of an open file or folder (overlayfs keeps trusted.overlay.* on folders).
void lc_copy_xattrs(int from, int to, const std::string& where) {
  ssize_t n = ::flistxattr(from, nullptr, 0);
  if (n <= 0) return;
  std::vector<char> names(static_cast<size_t>(n));
  n = ::flistxattr(from, names.data(), names.size());
  for (ssize_t i = 0; i < n;) {
    const char* name = names.data() + i;
    i += static_cast<ssize_t>(std::strlen(name)) + 1;
    ssize_t len = ::fgetxattr(from, name, nullptr, 0);
    if (len < 0) continue;
    std::vector<char> value(static_cast<size_t>(len));
    len = ::fgetxattr(from, name, value.data(), value.size());
    if (len < 0) continue;
    if (::fsetxattr(to, name, value.data(), static_cast<size_t>(len), 0) != 0 && errno != ENOTSUP)
      lc_fail("copy an attribute to", where);
  }
}

// Data only: holes stay holes (SEEK_DATA / SEEK_HOLE), so a sparse file costs its data, not its size.
void lc_copy_data(int in, int out, off_t size, const std::string& where, LayerCopyStats& stats) {
  off_t at = 0;
  while (at < size) {
    off_t data = ::lseek(in, at, SEEK_DATA);
    if (data < 0) break;  // ENXIO: only a hole is left
    off_t hole = ::lseek(in, data, SEEK_HOLE);
    if (hole < 0) hole = size;
    off_t pos_in = data, pos_out = data;
    while (pos_in < hole) {
      ssize_t n = ::copy_file_range(in, &pos_in, out, &pos_out, static_cast<size_t>(hole - pos_in), 0);
      if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP || errno == EINVAL)) {
        char buf[1 << 16];
        ssize_t r = ::pread(in, buf, std::min<off_t>(sizeof buf, hole - pos_in), pos_in);
        if (r <= 0 || ::pwrite(out, buf, static_cast<size_t>(r), pos_out) != r) lc_fail("write", where);
        n = r;
        pos_in += r;
        pos_out += r;
      } else if (n < 0) {
        lc_fail("copy", where);
      } else if (n == 0) {
        break;  // the file shrank meanwhile
      }
      stats.bytes += static_cast<uint64_t>(n);
    }
    at = hole;
  }
  if (::ftruncate(out, size) != 0) lc_fail("size", where);
}

void lc_set_owner_mode_times(int dir, const char* name, const struct stat& st, uint32_t fb, uint32_t tb,
                             const std::string& where) {
  if (::fchownat(dir, name, lc_shift(st.st_uid, fb, tb), lc_shift(st.st_gid, fb, tb), AT_SYMLINK_NOFOLLOW) != 0)
    lc_fail("set the owner of", where);
  // chown clears set-id bits: the mode goes back after it (symlinks have none).
  if (!S_ISLNK(st.st_mode) && ::fchmodat(dir, name, st.st_mode & 07777, 0) != 0) lc_fail("set the mode of", where);
  const timespec times[2] = {st.st_atim, st.st_mtim};
  ::utimensat(dir, name, times, AT_SYMLINK_NOFOLLOW);
}

void lc_copy_dir(int from, int to, const std::string& where, uint32_t fb, uint32_t tb, LayerCopyStats& stats) {
  const int list_fd = ::dup(from);
  DIR* d = list_fd >= 0 ? ::fdopendir(list_fd) : nullptr;
  if (!d) {
    if (list_fd >= 0) ::close(list_fd);
    lc_fail("list", where);
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  ::closedir(d);
  for (const auto& name : names) {
    const std::string entry = where + "/" + name;
    const char* n = name.c_str();
    struct stat st;
    if (::fstatat(from, n, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed meanwhile
      lc_fail("read", entry);
    }
    if (S_ISDIR(st.st_mode)) {
      if (::mkdirat(to, n, 0700) != 0) lc_fail("create", entry);
      LcFd src(::openat(from, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      LcFd dst(::openat(to, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (src.get() < 0 || dst.get() < 0) lc_fail("open", entry);
      ++stats.dirs;
      lc_copy_dir(src.get(), dst.get(), entry, fb, tb, stats);
      lc_copy_xattrs(src.get(), dst.get(), entry);
    } else if (S_ISREG(st.st_mode)) {
      LcFd src(::openat(from, n, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
      LcFd dst(::openat(to, n, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
      if (src.get() < 0 || dst.get() < 0) lc_fail("open", entry);
      lc_copy_data(src.get(), dst.get(), st.st_size, entry, stats);
      lc_copy_xattrs(src.get(), dst.get(), entry);
      ++stats.files;
    } else if (S_ISLNK(st.st_mode)) {
      std::vector<char> target(static_cast<size_t>(st.st_size) + 2);
      ssize_t len = ::readlinkat(from, n, target.data(), target.size() - 1);
      if (len < 0) lc_fail("read the link", entry);
      target[static_cast<size_t>(len)] = 0;
      if (::symlinkat(target.data(), to, n) != 0) lc_fail("create the link", entry);
    } else {
      // Whiteouts (0/0 character devices: files deleted from the base), FIFOs and sockets.
      if (::mknodat(to, n, st.st_mode, st.st_rdev) != 0) lc_fail("create", entry);
    }
    lc_set_owner_mode_times(to, n, st, fb, tb, entry);
  }
}

}  // namespace

LayerCopyStats copy_layer(const std::string& from, const std::string& to, uint32_t from_base, uint32_t to_base) {
  LayerCopyStats stats;
  LcFd src(::open(from.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  LcFd dst(::open(to.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (src.get() < 0) lc_fail("open", from);
  if (dst.get() < 0) lc_fail("open", to);
  lc_copy_dir(src.get(), dst.get(), from, from_base, to_base, stats);
  lc_copy_xattrs(src.get(), dst.get(), from);
  struct stat st;
  if (::fstat(src.get(), &st) != 0) lc_fail("read", from);
  if (::fchown(dst.get(), lc_shift(st.st_uid, from_base, to_base), lc_shift(st.st_gid, from_base, to_base)) != 0 ||
      ::fchmod(dst.get(), st.st_mode & 07777) != 0)
    lc_fail("set the owner of", to);
  return stats;
}

}  // namespace k3::agentenv
