#include "agentenv/layer_copy.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "base/error.h"

namespace k3::agentenv {
namespace {

uint32_t lc_shift(uint32_t id, uint32_t from_base, uint32_t to_base) {
  return id >= from_base && id - from_base < 65536 ? id - from_base + to_base : id;
}

void lc_copy_xattrs(const std::string& from, const std::string& to) {
  ssize_t n = ::llistxattr(from.c_str(), nullptr, 0);
  if (n <= 0) return;
  std::vector<char> names(static_cast<size_t>(n));
  n = ::llistxattr(from.c_str(), names.data(), names.size());
  for (ssize_t i = 0; i < n;) {
    const char* name = names.data() + i;
    i += static_cast<ssize_t>(std::strlen(name)) + 1;
    ssize_t len = ::lgetxattr(from.c_str(), name, nullptr, 0);
    if (len < 0) continue;
    std::vector<char> value(static_cast<size_t>(len));
    len = ::lgetxattr(from.c_str(), name, value.data(), value.size());
    if (len < 0) continue;
    if (::lsetxattr(to.c_str(), name, value.data(), static_cast<size_t>(len), 0) != 0 && errno != ENOTSUP)
      fail("fork: cannot copy attribute ", name, " to ", to, ": ", std::strerror(errno));
  }
}

void lc_copy_file(const std::string& from, const std::string& to, const struct stat& st, LayerCopyStats& stats) {
  int in = ::open(from.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (in < 0) fail("fork: cannot read ", from, ": ", std::strerror(errno));
  int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, st.st_mode & 07777);
  if (out < 0) {
    ::close(in);
    fail("fork: cannot create ", to, ": ", std::strerror(errno));
  }
  off_t left = st.st_size;
  while (left > 0) {
    ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, static_cast<size_t>(left), 0);
    if (n <= 0) {
      // Older kernels or cross-device: plain reads and writes.
      char buf[1 << 16];
      ssize_t r = ::read(in, buf, sizeof buf);
      if (r <= 0) break;
      if (::write(out, buf, static_cast<size_t>(r)) != r) {
        ::close(in);
        ::close(out);
        fail("fork: cannot write ", to, ": ", std::strerror(errno));
      }
      n = r;
    }
    left -= n;
    stats.bytes += static_cast<uint64_t>(n);
  }
  ::close(in);
  ::close(out);
  ++stats.files;
}

void lc_copy_tree(const std::string& from, const std::string& to, uint32_t fb, uint32_t tb, LayerCopyStats& stats) {
  DIR* d = ::opendir(from.c_str());
  if (!d) fail("fork: cannot list ", from, ": ", std::strerror(errno));
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  }
  ::closedir(d);
  for (const auto& name : names) {
    const std::string src = from + "/" + name, dst = to + "/" + name;
    struct stat st;
    if (::lstat(src.c_str(), &st) != 0) continue;  // removed meanwhile
    if (S_ISDIR(st.st_mode)) {
      if (::mkdir(dst.c_str(), st.st_mode & 07777) != 0) fail("fork: cannot create ", dst, ": ", std::strerror(errno));
      ++stats.dirs;
      lc_copy_tree(src, dst, fb, tb, stats);
    } else if (S_ISREG(st.st_mode)) {
      lc_copy_file(src, dst, st, stats);
    } else if (S_ISLNK(st.st_mode)) {
      std::vector<char> target(static_cast<size_t>(st.st_size) + 1);
      ssize_t n = ::readlink(src.c_str(), target.data(), target.size());
      if (n < 0) fail("fork: cannot read link ", src, ": ", std::strerror(errno));
      if (::symlink(std::string(target.data(), static_cast<size_t>(n)).c_str(), dst.c_str()) != 0)
        fail("fork: cannot create link ", dst, ": ", std::strerror(errno));
    } else {
      // Whiteouts (0/0 character devices), FIFOs and sockets.
      if (::mknod(dst.c_str(), st.st_mode, st.st_rdev) != 0) fail("fork: cannot create ", dst, ": ", std::strerror(errno));
    }
    lc_copy_xattrs(src, dst);
    if (::lchown(dst.c_str(), lc_shift(st.st_uid, fb, tb), lc_shift(st.st_gid, fb, tb)) != 0)
      fail("fork: cannot set the owner of ", dst, ": ", std::strerror(errno));
    // chown clears set-id bits: the mode goes back after it.
    if (!S_ISLNK(st.st_mode) && ::chmod(dst.c_str(), st.st_mode & 07777) != 0)
      fail("fork: cannot set the mode of ", dst, ": ", std::strerror(errno));
    const timespec times[2] = {st.st_atim, st.st_mtim};
    ::utimensat(AT_FDCWD, dst.c_str(), times, AT_SYMLINK_NOFOLLOW);
  }
}

}  // namespace

LayerCopyStats copy_layer(const std::string& from, const std::string& to, uint32_t from_base, uint32_t to_base) {
  LayerCopyStats stats;
  struct stat st;
  if (::lstat(from.c_str(), &st) != 0) fail("fork: ", from, ": ", std::strerror(errno));
  lc_copy_tree(from, to, from_base, to_base, stats);
  lc_copy_xattrs(from, to);
  if (::lchown(to.c_str(), lc_shift(st.st_uid, from_base, to_base), lc_shift(st.st_gid, from_base, to_base)) != 0 ||
      ::chmod(to.c_str(), st.st_mode & 07777) != 0)
    fail("fork: cannot set the owner of ", to, ": ", std::strerror(errno));
  return stats;
}

}  // namespace k3::agentenv
