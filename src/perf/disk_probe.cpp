#include "perf/disk_probe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "base/error.h"
#include "io/extent_reader.h"
#include "perf/stopwatch.h"

namespace k3 {
namespace {

// A batch of reads: the reader splits it into its own chunks over its threads.
constexpr uint64_t kBatch = uint64_t{256} << 20;

struct File {
  std::string path;
  int fd = -1;
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

}  // namespace

DiskProbeResult probe_disk(const std::vector<std::string>& paths, const DiskProbeOptions& options) {
  K3_CHECK(!paths.empty(), "disk probe: no files to read");
  K3_CHECK(options.threads >= 1, "disk probe: needs at least 1 thread (got ", options.threads, ")");
  // The weight store's own reader does the reading; a plain descriptor per file tells data from holes.
  ExtentReader reader(paths, options.threads);
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
    f.fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) fail(p, ": cannot open: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(f.fd, &st) != 0) fail(p, ": cannot stat: ", std::strerror(errno));
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
  r.direct = reader.direct();
  for (size_t i = 0; i < files.size(); ++i) {
    const File& f = files[i];
    if (f.take == 0) continue;
    ++r.files;
    for (uint64_t off = 0; off < f.take; off += kBatch)
      chunks.push_back({static_cast<int>(i), off, std::min(kBatch, f.take - off)});
  }
  K3_CHECK(!chunks.empty(), "disk probe: the files are empty (", paths.front(), paths.size() > 1 ? ", ..." : "", ")");

  // Batches into one scratch buffer, one after another (its contents do not matter), so the
  // time limit is checked between them.
  void* mem = std::aligned_alloc(ExtentReader::kAlign, kBatch);
  if (mem == nullptr) throw std::bad_alloc();
  const std::unique_ptr<void, decltype(&std::free)> hold(mem, &std::free);
  uint64_t ranged = 0, data = 0;
  const double t0 = now_seconds();
  for (const Chunk& c : chunks) {
    if (now_seconds() - t0 > options.max_seconds) {
      r.stopped_early = true;
      break;
    }
    auto ticket = std::make_shared<ExtentReader::Ticket>();
    reader.read(c.file, c.offset, c.length, static_cast<uint8_t*>(mem), ticket, false);
    ticket->wait();
    ranged += c.length;
    data += data_bytes(files[static_cast<size_t>(c.file)].fd, c.offset, c.offset + c.length);
  }
  r.seconds = now_seconds() - t0;
  r.bytes = ranged;
  r.hole_fraction = ranged ? 1.0 - static_cast<double>(data) / static_cast<double>(ranged) : 0.0;
  r.gbps = r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e9 : 0.0;
  return r;
}

}  // namespace k3
