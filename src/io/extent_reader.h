// Reads byte ranges of checkpoint files into caller memory with large reads, bypassing the page
// cache (O_DIRECT) where the file system allows it.  The weight store (model/weight_store.h)
// streams the trunk and loads routed experts through it: direct reads keep a checkpoint larger
// than RAM from filling the page cache (whose 4 KiB pages would also count against the memory
// the user gave k3), and a hole in a sparse file reads as zeros at memory speed.  Where O_DIRECT
// is refused (tmpfs, some overlays) the file is read through the page cache and the pages are
// dropped after each read (POSIX_FADV_DONTNEED).  A file system that accepts O_DIRECT at open()
// but fails the reads with EINVAL gets the same treatment from its first failed read on.
//
// Two backends do the reading, chosen at construction: a few threads of pread(2), or one thread
// that keeps several reads in flight through io_uring (io/uring_queue.h).  Where the kernel
// refuses io_uring (old kernel, seccomp, container policy) the reader uses pread threads.
//
// Requests are split into chunks of at most kChunkBytes; urgent ones (an expert a layer waits
// for) are served before background ones (the trunk's next layers).  Completion is a Ticket the
// caller waits on; a read error or a file that shrank is reported there, naming the file.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace k3 {

class UringQueue;

class ExtentReader {
 public:
  // Direct I/O needs buffers, offsets and lengths aligned to the device's logical block; 4 KiB
  // covers every block size in use.
  static constexpr uint64_t kAlign = 4096;
  static constexpr uint64_t kChunkBytes = uint64_t{8} << 20;

  // kAuto: kPread, the reader's original backend.
  enum class Backend { kPread, kUring, kAuto };
  // "pread" or "uring"; nullptr or "" is kAuto.  Throws k3::Error naming the variable otherwise.
  static Backend backend_named(const char* name, const char* variable = "K3_IO");

  // One pending read set: done when every chunk has been read.
  class Ticket {
   public:
    // Blocks until every chunk is read; throws k3::Error with the first failure.
    void wait();
    bool done() const { return remaining_.load(std::memory_order_acquire) == 0; }

   private:
    friend class ExtentReader;
    std::atomic<int64_t> remaining_{0};
    std::mutex mu_;
    std::condition_variable cv_;
    std::string error_;
  };

  // files: paths, indexed by the `file` of each read.  in_flight: reads in flight at once
  // (reader threads for pread, queue depth for io_uring; 0: 4).  Throws k3::Error naming a file
  // that cannot be opened.
  ExtentReader(const std::vector<std::string>& files, int in_flight = 0, Backend backend = Backend::kAuto);
  ~ExtentReader();
  ExtentReader(const ExtentReader&) = delete;
  ExtentReader& operator=(const ExtentReader&) = delete;

  // Reads [offset, offset + length) of files[file] into dst.  offset and dst must be aligned to
  // kAlign; length is rounded up to it, so dst must have room for that (bytes past the end of
  // the file are left as they are).  Adds the chunks to *ticket.
  void read(int file, uint64_t offset, uint64_t length, uint8_t* dst, const std::shared_ptr<Ticket>& ticket,
            bool urgent);

  // Bytes read since construction, and whether every file is (still) read with O_DIRECT.
  uint64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }
  bool direct() const { return all_direct_.load(std::memory_order_relaxed); }
  const std::string& path(int file) const { return files_[file]->path; }
  // The backend doing the reads: kPread or kUring (never kAuto).
  Backend backend() const { return uring_ ? Backend::kUring : Backend::kPread; }

  // Tests only.  While held, no chunk is started (queued ones wait), so a test can queue
  // requests and then see the order they are served in.
  void hold_for_testing(bool hold);
  // Tests only.  The next direct read of files[file] asks the kernel for one byte less than the
  // chunk: a length O_DIRECT refuses with EINVAL where the file holds data (ext4, xfs), so the
  // buffered fallback runs on the kernel's own EINVAL.
  void fail_next_direct_read_for_testing(int file);

 private:
  struct Chunk {
    int file;
    uint64_t offset, length;
    uint8_t* dst;
    std::shared_ptr<Ticket> ticket;
  };
  struct File {
    std::string path;
    uint64_t size = 0;                 // at open: a read that ends short of it means the file shrank
    int direct_fd = -1;                // opened with O_DIRECT; -1 where that was refused
    std::atomic<int> buffered_fd{-1};  // opened without it, when direct_fd is -1 or its reads fail
    std::atomic<bool> break_next_direct{false};
  };
  // The descriptor a read of a file uses now, and whether it is the O_DIRECT one.
  struct Fd {
    int fd;
    bool direct;
  };

  Fd fd_of(int file) const;
  // A direct read of files[file] failed with EINVAL: switches the file to buffered reads
  // (once, whichever thread comes first).  On failure returns {-1, false} and sets *error.
  Fd fall_back_to_buffered(int file, std::string* error);
  // The length to ask the kernel for (shortened by fail_next_direct_read_for_testing).
  uint64_t request_length(int file, const Fd& fd, uint64_t length);
  // Pops the next chunk, urgent first; false when none may start.  Called with mu_ held.
  bool take_chunk(Chunk* c);
  void pread_worker();
  void run_chunk(const Chunk& c);
  void uring_loop();
  // Checks for a shrunk file, drops buffered pages, counts the bytes and completes the chunk.
  void finish_chunk(const Chunk& c, uint64_t done, std::string error, const Fd& fd);

  std::vector<std::unique_ptr<File>> files_;
  std::atomic<bool> all_direct_{true};
  std::mutex fallback_mu_;  // serializes fall_back_to_buffered
  std::mutex mu_;
  std::condition_variable cv_;  // pread workers wait here for chunks
  std::deque<Chunk> urgent_, background_;
  bool stop_ = false;
  bool held_ = false;
  std::unique_ptr<UringQueue> uring_;  // set when the io_uring backend reads
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> bytes_read_{0};
};

}  // namespace k3
