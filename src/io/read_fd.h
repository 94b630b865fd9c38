// Reading a whole file descriptor with read(2), for the places that must say why a read failed
// (an ifstream reports neither the reason nor, through istreambuf_iterator, the failure at all).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <string>

namespace k3 {

// Owns a file descriptor and closes it on every way out of a scope (a throw included), so the
// open-stat-read sequences need no close() before each error.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads fd to its end (EINTR retried), but never more than max_bytes + 1 bytes, so a caller can
// tell an input over its limit without reading all of it; size_hint (e.g. st_size) only sizes the
// first buffer.  Throws k3::Error "<what>: <strerror>".  Does not close fd.
std::string read_fd(int fd, const std::string& what, uint64_t max_bytes = UINT64_MAX, uint64_t size_hint = 0);

}  // namespace k3
