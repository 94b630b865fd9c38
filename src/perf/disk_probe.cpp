#include "perf/disk_probe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "perf/stopwatch.h"

namespace k3 {
namespace {

constexpr uint64_t kAlign = 4096;
constexpr uint64_t kChunk = uint64_t{8} << 20;

struct File {
  std::string path;
  int fd = -1;
  bool direct = false;
  uint64_t size = 0;
  uint64_t take = 0;  // bytes to read from its start
};

struct Chunk {
  int file;
  uint64_t offset, length;
};

// Bytes of [begin, end) that hold data (not holes); the whole range where the file system
// cannot tell.
uint64_t data_bytes(int fd, uint64_t begin, uint64_t end) {
  uint64_t data = 0, pos = begin;
  while (pos < end) {
    const off_t d = ::lseek(fd, static_cast<off_t>(pos), SEEK_DATA);
    if (d < 0) {
      if (errno == ENXIO) break;  // only a hole from pos to the end of the file
      return end - begin;         // SEEK_DATA unsupported: count everything as data
    }
    if (static_cast<uint64_t>(d) >= end) break;
    const off_t h = ::lseek(fd, d, SEEK_HOLE);
    const uint64_t hole = h < 0 ? end : std::min<uint64_t>(static_cast<uint64_t>(h), end);
    data += hole - static_cast<uint64_t>(d);
    pos = hole;
  }
  return data;
}

struct Buffer {
  uint8_t* p = nullptr;
  Buffer() {
    p = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kChunk));
    if (p == nullptr) throw std::bad_alloc();
  }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

}  // namespace

DiskProbeResult probe_disk(const std::vector<std::string>& paths, const DiskProbeOptions& options) {
  K3_CHECK(!paths.empty(), "disk probe: no files to read");
  K3_CHECK(options.threads >= 1, "disk probe: needs at least 1 thread (got ", options.threads, ")");
  std::vector<File> files;
  struct Closer {
    std::vector<File>* f;
    ~Closer() {
      for (File& x : *f)
        if (x.fd >= 0) ::close(x.fd);
    }
  } closer{&files};
  for (const std::string& p : paths) {
    File f;
    f.path = p;
    f.fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    f.direct = f.fd >= 0;
    if (f.fd < 0 && errno == EINVAL) f.fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) fail(p, ": cannot open: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(f.fd, &st) != 0) {
      const int err = errno;
      ::close(f.fd);
      fail(p, ": cannot stat: ", std::strerror(err));
    }
    f.size = static_cast<uint64_t>(st.st_size);
    files.push_back(std::move(f));
  }

  // Shares: max_bytes spread evenly, then what the smaller files could not take from the rest.
  uint64_t left = options.max_bytes;
  // Each round either places all that is left or fills at least one file, so this ends.
  while (left > 0) {
    uint64_t open = 0;
    for (const File& f : files) open += f.take < f.size ? 1 : 0;
    if (open == 0) break;
    const uint64_t share = (left + open - 1) / open;
    for (File& f : files) {
      const uint64_t more = std::min({share, f.size - f.take, left});
      f.take += more;
      left -= more;
    }
  }
  std::vector<Chunk> chunks;
  DiskProbeResult r;
  for (size_t i = 0; i < files.size(); ++i) {
    File& f = files[i];
    if (f.take == 0) continue;
    ++r.files;
    r.direct = r.direct && f.direct;
    for (uint64_t off = 0; off < f.take; off += kChunk)
      chunks.push_back({static_cast<int>(i), off, std::min(kChunk, f.take - off)});
  }
  K3_CHECK(!chunks.empty(), "disk probe: the files are empty (", paths.front(), paths.size() > 1 ? ", ..." : "", ")");

  std::vector<std::unique_ptr<Buffer>> buffers;  // allocated here: a worker thread must not throw
  for (int t = 0; t < options.threads; ++t) buffers.push_back(std::make_unique<Buffer>());
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> bytes{0}, ranged{0}, data{0};
  std::atomic<bool> late{false};
  std::mutex error_mu;
  std::string error;
  const double t0 = now_seconds();
  auto worker = [&](int t) {
    Buffer& buf = *buffers[t];
    for (;;) {
      if (now_seconds() - t0 > options.max_seconds) {
        late = true;
        return;
      }
      const size_t i = next.fetch_add(1);
      if (i >= chunks.size()) return;
      const Chunk& c = chunks[i];
      const File& f = files[c.file];
      // Direct reads need block-aligned lengths; a short read at the end of the file is fine.
      const uint64_t length = f.direct ? (c.length + kAlign - 1) / kAlign * kAlign : c.length;
      if (!f.direct)
        ::posix_fadvise(f.fd, static_cast<off_t>(c.offset), static_cast<off_t>(length), POSIX_FADV_DONTNEED);
      uint64_t done = 0;
      while (done < length) {
        const ssize_t n = ::pread(f.fd, buf.p + done, length - done, static_cast<off_t>(c.offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          std::lock_guard<std::mutex> lock(error_mu);
          if (error.empty()) error = cat(f.path, ": read error at byte ", c.offset + done, ": ", std::strerror(errno));
          next = chunks.size();
          return;
        }
        if (n == 0) break;
        done += static_cast<uint64_t>(n);
        if (f.direct && static_cast<uint64_t>(n) % kAlign != 0) break;
      }
      if (!f.direct)
        ::posix_fadvise(f.fd, static_cast<off_t>(c.offset), static_cast<off_t>(length), POSIX_FADV_DONTNEED);
      bytes.fetch_add(std::min(done, c.length), std::memory_order_relaxed);
      ranged.fetch_add(c.length, std::memory_order_relaxed);
      data.fetch_add(data_bytes(f.fd, c.offset, c.offset + c.length), std::memory_order_relaxed);
    }
  };
  std::vector<std::thread> threads;
  try {
    for (int t = 0; t < options.threads; ++t) threads.emplace_back(worker, t);
  } catch (const std::system_error& e) {
    next = chunks.size();
    for (std::thread& t : threads) t.join();
    fail("disk probe: cannot start reader threads: ", e.what());
  }
  for (std::thread& t : threads) t.join();
  r.seconds = now_seconds() - t0;
  if (!error.empty()) throw Error(error);
  r.bytes = bytes.load();
  r.hole_fraction = ranged.load() ? 1.0 - static_cast<double>(data.load()) / static_cast<double>(ranged.load()) : 0.0;
  r.gbps = r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e9 : 0.0;
  r.stopped_early = late.load();
  return r;
}

}  // namespace k3
