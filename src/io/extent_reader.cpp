#include "io/extent_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "base/log.h"
#include "io/uring_queue.h"

namespace k3 {
namespace {

constexpr int kDefaultInFlight = 4;
// What kAuto reads with (see ExtentReader::Backend).
constexpr ExtentReader::Backend kAutoBackend = ExtentReader::Backend::kPread;

}  // namespace

void ExtentReader::Ticket::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return remaining_.load(std::memory_order_acquire) == 0; });
  if (!error_.empty()) throw Error(error_);
}

ExtentReader::Backend ExtentReader::backend_named(const char* name, const char* variable) {
  if (name == nullptr || *name == '\0') return Backend::kAuto;
  const std::string n = name;
  if (n == "pread") return Backend::kPread;
  if (n == "uring") return Backend::kUring;
  fail(variable, "=", n, ": unknown checkpoint read backend (expected pread or uring)");
}

ExtentReader::ExtentReader(const std::vector<std::string>& files, int in_flight, Backend backend) {
  auto close_all = [&] {
    for (const auto& f : files_) {
      if (f->direct_fd >= 0) ::close(f->direct_fd);
      if (f->buffered_fd >= 0) ::close(f->buffered_fd);
    }
  };
  for (const std::string& p : files) {
    auto f = std::make_unique<File>();
    f->path = p;
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd >= 0) f->direct_fd = fd;
    else if (errno == EINVAL) fd = f->buffered_fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      close_all();
      fail(p, ": cannot open: ", std::strerror(err));
    }
    struct stat st {};
    ::fstat(fd, &st);
    f->size = static_cast<uint64_t>(st.st_size);
    if (f->direct_fd < 0) all_direct_ = false;
    files_.push_back(std::move(f));
  }
  if (!all_direct_) log_info("checkpoint files: O_DIRECT refused by the file system, reading through the page cache");

  const int n = in_flight > 0 ? in_flight : kDefaultInFlight;
  if (backend == Backend::kAuto) backend = kAutoBackend;
  if (backend == Backend::kUring) {
    int err = 0;
    uring_ = UringQueue::create(static_cast<unsigned>(n), &err);
    if (!uring_) log_debug("checkpoint reads: io_uring unavailable (", std::strerror(err), "), using pread threads");
  }
  try {
    if (uring_) threads_.emplace_back([this] { uring_loop(); });
    else
      for (int i = 0; i < n; ++i) threads_.emplace_back([this] { pread_worker(); });
  } catch (const std::system_error& e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    close_all();
    fail("cannot start checkpoint reader threads: ", e.what());
  }
}

ExtentReader::~ExtentReader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (uring_) uring_->wake();
  for (std::thread& t : threads_) t.join();
  for (const auto& f : files_) {
    if (f->direct_fd >= 0) ::close(f->direct_fd);
    if (f->buffered_fd >= 0) ::close(f->buffered_fd);
  }
}

void ExtentReader::read(int file, uint64_t offset, uint64_t length, uint8_t* dst,
                        const std::shared_ptr<Ticket>& ticket, bool urgent) {
  K3_CHECK(file >= 0 && file < static_cast<int>(files_.size()), "ExtentReader: no file ", file);
  K3_CHECK(offset % kAlign == 0 && reinterpret_cast<uintptr_t>(dst) % kAlign == 0,
           "ExtentReader: unaligned read of ", files_[file]->path, " at byte ", offset);
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
  if (uring_) uring_->wake();
  else if (chunks.size() == 1) cv_.notify_one();
  else cv_.notify_all();
}

void ExtentReader::hold_for_testing(bool hold) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = hold;
  }
  cv_.notify_all();
  if (uring_) uring_->wake();
}

void ExtentReader::fail_next_direct_read_for_testing(int file) {
  files_[file]->break_next_direct.store(true, std::memory_order_relaxed);
}

ExtentReader::Fd ExtentReader::fd_of(int file) const {
  const File& f = *files_[file];
  const int buffered = f.buffered_fd.load(std::memory_order_acquire);
  return buffered >= 0 ? Fd{buffered, false} : Fd{f.direct_fd, true};
}

ExtentReader::Fd ExtentReader::fall_back_to_buffered(int file, std::string* error) {
  File& f = *files_[file];
  std::lock_guard<std::mutex> lock(fallback_mu_);
  // The direct descriptor stays open (reads still in flight on it finish or fail on their own),
  // so its number cannot be reused for another file under them.
  if (f.buffered_fd.load(std::memory_order_acquire) < 0) {
    const int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      *error = cat(f.path, ": O_DIRECT reads fail with EINVAL, and reopening it without O_DIRECT failed: ",
                   std::strerror(errno));
      return {-1, false};
    }
    f.buffered_fd.store(fd, std::memory_order_release);
    all_direct_.store(false, std::memory_order_relaxed);
    log_info(f.path, ": O_DIRECT reads fail with EINVAL on this file system; reading it through the page cache");
  }
  return fd_of(file);
}

uint64_t ExtentReader::request_length(int file, const Fd& fd, uint64_t length) {
  if (fd.direct && files_[file]->break_next_direct.exchange(false, std::memory_order_relaxed)) return length - 1;
  return length;
}

bool ExtentReader::take_chunk(Chunk* c) {
  if (held_ || (urgent_.empty() && background_.empty())) return false;
  auto& q = !urgent_.empty() ? urgent_ : background_;
  *c = std::move(q.front());
  q.pop_front();
  return true;
}

void ExtentReader::pread_worker() {
  for (;;) {
    Chunk c;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || take_chunk(&c); });
      if (stop_) return;
    }
    run_chunk(c);
  }
}

void ExtentReader::run_chunk(const Chunk& c) {
  std::string error;
  Fd fd = fd_of(c.file);
  uint64_t done = 0;
  while (done < c.length) {
    const uint64_t want = request_length(c.file, fd, c.length - done);
    const ssize_t r = ::pread(fd.fd, c.dst + done, want, static_cast<off_t>(c.offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EINVAL && fd.direct) {
      fd = fall_back_to_buffered(c.file, &error);
      if (fd.fd < 0) break;
      continue;
    }
    if (r < 0) {
      error = cat(files_[c.file]->path, ": read error at byte ", c.offset + done, ": ", std::strerror(errno));
      break;
    }
    if (r == 0) break;  // the end of the file (checked in finish_chunk)
    done += static_cast<uint64_t>(r);
    // A direct read may stop at the file's end mid-block; anything after it is past the end.
    if (fd.direct && static_cast<uint64_t>(r) % kAlign != 0) break;
  }
  finish_chunk(c, done, std::move(error), fd);
}

void ExtentReader::uring_loop() {
  // A chunk in flight: its read is [c.offset + done, c.offset + c.length) through fd.
  struct Slot {
    Chunk c;
    uint64_t done = 0;
    Fd fd{-1, false};
  };
  UringQueue& q = *uring_;
  std::vector<Slot> slots(q.depth());
  std::vector<uint32_t> free_slots;
  for (uint32_t i = q.depth(); i-- > 0;) free_slots.push_back(i);
  auto submit = [&](uint32_t i) {
    Slot& s = slots[i];
    const uint64_t want = request_length(s.c.file, s.fd, s.c.length - s.done);
    q.read(s.fd.fd, s.c.dst + s.done, static_cast<uint32_t>(want), s.c.offset + s.done, i);
  };
  auto finish = [&](uint32_t i, std::string error) {
    Slot& s = slots[i];
    finish_chunk(s.c, s.done, std::move(error), s.fd);
    s.c = Chunk{};  // drops the ticket
    free_slots.push_back(i);
  };
  std::vector<uint32_t> started;
  std::vector<UringQueue::Completion> completions;
  for (;;) {
    started.clear();
    bool stopping = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping = stop_;
      Chunk c;
      while (!stopping && !free_slots.empty() && take_chunk(&c)) {
        const uint32_t i = free_slots.back();
        free_slots.pop_back();
        slots[i].c = std::move(c);
        started.push_back(i);
      }
    }
    for (uint32_t i : started) {
      slots[i].done = 0;
      slots[i].fd = fd_of(slots[i].c.file);
      submit(i);
    }
    // On stop, queued chunks are dropped, but the kernel still writes to the buffers of those
    // in flight: wait for them.
    if (stopping && free_slots.size() == slots.size()) return;
    completions.clear();
    q.wait(&completions);
    for (const UringQueue::Completion& done : completions) {
      const uint32_t i = static_cast<uint32_t>(done.tag);
      Slot& s = slots[i];
      const int res = done.res;
      if (res == -EINTR || res == -EAGAIN) {
        submit(i);
      } else if (res == -EINVAL && s.fd.direct) {
        std::string error;
        s.fd = fall_back_to_buffered(s.c.file, &error);
        if (s.fd.fd < 0) finish(i, std::move(error));
        else submit(i);
      } else if (res < 0) {
        finish(i, cat(files_[s.c.file]->path, ": read error at byte ", s.c.offset + s.done, ": ",
                      std::strerror(-res)));
      } else {
        s.done += static_cast<uint64_t>(res);
        // As with pread: 0 is the end of the file, and a direct read may stop mid-block there.
        const bool ended = res == 0 || (s.fd.direct && static_cast<uint64_t>(res) % kAlign != 0);
        if (s.done < s.c.length && !ended) submit(i);
        else finish(i, "");
      }
    }
  }
}

void ExtentReader::finish_chunk(const Chunk& c, uint64_t done, std::string error, const Fd& fd) {
  const File& f = *files_[c.file];
  // Short of the file's size when it was opened: it shrank (or was replaced) under the checkpoint.
  const uint64_t want = std::min(c.offset + c.length, f.size);
  if (error.empty() && c.offset + done < want) {
    const off_t now = ::lseek(fd.fd, 0, SEEK_END);
    error = cat(f.path, ": file shrank to ", now, " bytes while the checkpoint was open (it had ", f.size,
                "); a read at byte ", c.offset + done, " came back short");
  }
  if (fd.fd >= 0 && !fd.direct)
    ::posix_fadvise(fd.fd, static_cast<off_t>(c.offset), static_cast<off_t>(c.length), POSIX_FADV_DONTNEED);
  bytes_read_.fetch_add(done, std::memory_order_relaxed);
  Ticket& t = *c.ticket;
  std::lock_guard<std::mutex> lock(t.mu_);
  if (!error.empty() && t.error_.empty()) t.error_ = error;
  if (t.remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) t.cv_.notify_all();
}

}  // namespace k3
