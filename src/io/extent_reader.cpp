#include "io/extent_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "base/log.h"

namespace k3 {

void ExtentReader::Ticket::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return remaining_.load(std::memory_order_acquire) == 0; });
  if (!error_.empty()) throw Error(error_);
}

ExtentReader::ExtentReader(const std::vector<std::string>& files, int threads) : paths_(files) {
  for (const std::string& p : paths_) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    bool direct = fd >= 0;
    if (fd < 0 && errno == EINVAL) fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      for (int f : fds_) ::close(f);
      fail(p, ": cannot open: ", std::strerror(err));
    }
    struct stat st {};
    ::fstat(fd, &st);
    sizes_.push_back(static_cast<uint64_t>(st.st_size));
    fds_.push_back(fd);
    is_direct_.push_back(direct);
    all_direct_ = all_direct_ && direct;
  }
  if (!all_direct_) log_info("checkpoint files: O_DIRECT refused by the file system, reading through the page cache");
  const int n = threads > 0 ? threads : 4;
  try {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { worker(); });
  } catch (const std::system_error& e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    for (int f : fds_) ::close(f);
    fail("cannot start checkpoint reader threads: ", e.what());
  }
}

ExtentReader::~ExtentReader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  for (int fd : fds_) ::close(fd);
}

void ExtentReader::read(int file, uint64_t offset, uint64_t length, uint8_t* dst,
                        const std::shared_ptr<Ticket>& ticket, bool urgent) {
  K3_CHECK(file >= 0 && file < static_cast<int>(fds_.size()), "ExtentReader: no file ", file);
  K3_CHECK(offset % kAlign == 0 && reinterpret_cast<uintptr_t>(dst) % kAlign == 0,
           "ExtentReader: unaligned read of ", paths_[file], " at byte ", offset);
  length = (length + kAlign - 1) / kAlign * kAlign;
  std::vector<Chunk> chunks;
  for (uint64_t done = 0; done < length; done += kChunkBytes)
    chunks.push_back({file, offset + done, std::min(kChunkBytes, length - done), dst + done, ticket});
  ticket->remaining_.fetch_add(static_cast<int64_t>(chunks.size()), std::memory_order_acq_rel);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& q = urgent ? urgent_ : background_;
    for (Chunk& c : chunks) q.push_back(std::move(c));
  }
  if (chunks.size() == 1) cv_.notify_one();
  else cv_.notify_all();
}

void ExtentReader::worker() {
  for (;;) {
    Chunk c;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !urgent_.empty() || !background_.empty(); });
      if (stop_) return;
      auto& q = !urgent_.empty() ? urgent_ : background_;
      c = std::move(q.front());
      q.pop_front();
    }
    run_chunk(c);
  }
}

void ExtentReader::run_chunk(const Chunk& c) {
  std::string error;
  const int fd = fds_[c.file];
  uint64_t done = 0;
  while (done < c.length) {
    const ssize_t r = ::pread(fd, c.dst + done, c.length - done, static_cast<off_t>(c.offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      error = cat(paths_[c.file], ": read error at byte ", c.offset + done, ": ", std::strerror(errno));
      break;
    }
    if (r == 0) break;  // the end of the file (checked below)
    done += static_cast<uint64_t>(r);
    // A direct read may stop at the file's end mid-block; anything after it is past the end.
    if (is_direct_[c.file] && static_cast<uint64_t>(r) % kAlign != 0) break;
  }
  // Short of the file's size when it was opened: it shrank (or was replaced) under the checkpoint.
  const uint64_t want = std::min(c.offset + c.length, sizes_[c.file]);
  if (error.empty() && c.offset + done < want) {
    const off_t now = ::lseek(fd, 0, SEEK_END);
    error = cat(paths_[c.file], ": file shrank to ", now, " bytes while the checkpoint was open (it had ",
                sizes_[c.file], "); a read at byte ", c.offset + done, " came back short");
  }
  if (!is_direct_[c.file])
    ::posix_fadvise(fd, static_cast<off_t>(c.offset), static_cast<off_t>(c.length), POSIX_FADV_DONTNEED);
  bytes_read_.fetch_add(done, std::memory_order_relaxed);
  Ticket& t = *c.ticket;
  std::lock_guard<std::mutex> lock(t.mu_);
  if (!error.empty() && t.error_.empty()) t.error_ = error;
  if (t.remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) t.cv_.notify_all();
}

}  // namespace k3
