// An io_uring submission/completion queue for file reads (liburing), owned by one thread: the
// ExtentReader's io_uring backend (io/extent_reader.h) keeps several large reads in flight
// through it from a single submitting thread.  Other threads may only call wake(), which ends
// a wait() early so the owner can pick up new work without waiting for a read to complete.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

struct io_uring;

namespace k3 {

class UringQueue {
 public:
  struct Completion {
    uint64_t tag;  // as given to read()
    int32_t res;   // bytes read, or -errno
  };

  // A ring for up to `depth` reads in flight.  nullptr where the kernel refuses io_uring (too
  // old, a seccomp filter or a container policy: ENOSYS, EPERM, ...), with *error set to the
  // errno; the caller reads some other way.
  static std::unique_ptr<UringQueue> create(unsigned depth, int* error);
  ~UringQueue();
  UringQueue(const UringQueue&) = delete;
  UringQueue& operator=(const UringQueue&) = delete;

  unsigned depth() const { return depth_; }

  // Queues a read of [offset, offset + length) of fd into dst; it is submitted by the next
  // wait().  The caller keeps at most depth() reads in flight.
  void read(int fd, uint8_t* dst, uint32_t length, uint64_t offset, uint64_t tag);

  // Submits the queued reads and blocks until at least one read completes or wake() is called
  // (possibly before this wait began); appends what completed to *out.  Throws k3::Error when
  // the kernel refuses the submission itself (not a failed read: that is a Completion).
  void wait(std::vector<Completion>* out);

  // Ends the owner's current or next wait(); safe from any thread.
  void wake();

 private:
  UringQueue(std::unique_ptr<io_uring> ring, int event_fd, unsigned depth);

  std::unique_ptr<io_uring> ring_;
  int event_fd_;
  unsigned depth_;
  bool poll_armed_ = false;  // a POLLIN on event_fd_ is in flight
};

}  // namespace k3
