#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "base/error.h"

namespace k3 {

Residency parse_residency(const std::string& name) {
  if (name == "auto") return Residency::kAuto;
  if (name == "memory") return Residency::kMemory;
  if (name == "mmap") return Residency::kMapped;
  fail("unknown weight residency '", name, "' (expected auto, memory or mmap)");
}

const char* residency_name(Residency r) {
  switch (r) {
    case Residency::kAuto: return "auto";
    case Residency::kMemory: return "memory";
    case Residency::kMapped: return "mmap";
  }
  return "?";
}

namespace {
std::atomic<int> g_default{-1};  // -1: not set yet (read K3_WEIGHTS on first use)
}  // namespace

void set_default_residency(Residency r) { g_default = static_cast<int>(r); }

Residency default_residency() {
  int v = g_default.load();
  if (v < 0) {
    const char* env = std::getenv("K3_WEIGHTS");
    v = static_cast<int>(env && *env ? parse_residency(env) : Residency::kAuto);
    g_default = v;
  }
  return static_cast<Residency>(v);
}

uint64_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  uint64_t kb = 0;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kb << 10;
  }
  return 0;
}

MappedFile::MappedFile(const std::string& path, Residency residency, size_t align_offset)
    : path_(path), residency_(residency == Residency::kMemory ? Residency::kMemory : Residency::kMapped) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(path, ": cannot stat: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, ": not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) {
    ::close(fd);
    return;
  }
  if (residency_ == Residency::kMapped) {
    mapped_ = size_;
    void* p = ::mmap(nullptr, mapped_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail(path, ": cannot map ", size_, " bytes: ", std::strerror(err));
    }
    base_ = p;
    data_ = static_cast<const uint8_t*>(p);
    ::close(fd);
    return;
  }
  // kMemory: anonymous memory in whole 2 MiB pages, filled by pread, then made read-only.
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t pad = (64 - align_offset % 64) % 64;
  mapped_ = (pad + size_ + kHuge - 1) / kHuge * kHuge;
  void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    fail(path, ": cannot allocate ", size_, " bytes to hold it in memory: ", std::strerror(err),
         " (use --weights mmap to stream it from the page cache)");
  }
  ::madvise(p, mapped_, MADV_HUGEPAGE);  // best effort: THP may be off
  char* dst = static_cast<char*>(p) + pad;
  size_t off = 0;
  while (off < size_) {
    const ssize_t r = ::pread(fd, dst + off, std::min<size_t>(size_ - off, size_t{64} << 20), static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int err = r < 0 ? errno : 0;
      ::munmap(p, mapped_);
      ::close(fd);
      if (r == 0) fail(path, ": file shrank while being read (", off, " of ", size_, " bytes)");
      fail(path, ": read error at byte ", off, ": ", std::strerror(err));
    }
    off += static_cast<size_t>(r);
  }
  ::close(fd);
  ::mprotect(p, mapped_, PROT_READ);  // weights are read-only in both residencies
  base_ = p;
  data_ = reinterpret_cast<const uint8_t*>(dst);
}

MappedFile::~MappedFile() {
  if (base_ != nullptr) ::munmap(base_, mapped_);
}

}  // namespace k3
