// Reads byte ranges of checkpoint files into caller memory with a few threads of large pread(2)
// calls, bypassing the page cache (O_DIRECT) where the file system allows it.  The weight store
// (model/weight_store.h) streams the trunk and loads routed experts through it: direct reads
// keep a checkpoint larger than RAM from filling the page cache (whose 4 KiB pages would also
// count against the memory the user gave k3), and a hole in a sparse file reads as zeros at
// memory speed.  Where O_DIRECT is refused (tmpfs, some overlays) the file is read through the
// page cache and the pages are dropped after each read (POSIX_FADV_DONTNEED).
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

class ExtentReader {
 public:
  // Direct I/O needs buffers, offsets and lengths aligned to the device's logical block; 4 KiB
  // covers every block size in use.
  static constexpr uint64_t kAlign = 4096;
  static constexpr uint64_t kChunkBytes = uint64_t{8} << 20;

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

  // files: paths, indexed by the `file` of each read.  threads: reader threads (0: 4).  Throws
  // k3::Error naming a file that cannot be opened.
  ExtentReader(const std::vector<std::string>& files, int threads = 0);
  ~ExtentReader();
  ExtentReader(const ExtentReader&) = delete;
  ExtentReader& operator=(const ExtentReader&) = delete;

  // Reads [offset, offset + length) of files[file] into dst.  offset and dst must be aligned to
  // kAlign; length is rounded up to it, so dst must have room for that (bytes past the end of
  // the file are left as they are).  Adds the chunks to *ticket.
  void read(int file, uint64_t offset, uint64_t length, uint8_t* dst, const std::shared_ptr<Ticket>& ticket,
            bool urgent);

  // Bytes read since construction, and whether every file is read with O_DIRECT.
  uint64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }
  bool direct() const { return all_direct_; }
  const std::string& path(int file) const { return paths_[file]; }

 private:
  struct Chunk {
    int file;
    uint64_t offset, length;
    uint8_t* dst;
    std::shared_ptr<Ticket> ticket;
  };
  void worker();
  void run_chunk(const Chunk& c);

  std::vector<std::string> paths_;
  std::vector<int> fds_;
  std::vector<uint64_t> sizes_;  // at open: a read that ends short of them means the file shrank
  std::vector<bool> is_direct_;
  bool all_direct_ = true;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Chunk> urgent_, background_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> bytes_read_{0};
};

}  // namespace k3
