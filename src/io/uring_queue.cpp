#include "io/uring_queue.h"

#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace k3 {
namespace {

// The tag of the poll on the wake-up eventfd; read tags are the caller's (slot indices).
constexpr uint64_t kWakeTag = ~uint64_t{0};

}  // namespace

std::unique_ptr<UringQueue> UringQueue::create(unsigned depth, int* error) {
  K3_CHECK(depth >= 1, "io_uring queue: depth must be at least 1 (got ", depth, ")");
  auto ring = std::make_unique<io_uring>();
  // One entry more than the reads: the poll on the wake-up eventfd.
  const int r = io_uring_queue_init(depth + 1, ring.get(), 0);
  if (r < 0) {
    *error = -r;
    return nullptr;
  }
  const int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd < 0) {
    *error = errno;
    io_uring_queue_exit(ring.get());
    return nullptr;
  }
  return std::unique_ptr<UringQueue>(new UringQueue(std::move(ring), efd, depth));
}

UringQueue::UringQueue(std::unique_ptr<io_uring> ring, int event_fd, unsigned depth)
    : ring_(std::move(ring)), event_fd_(event_fd), depth_(depth) {}

UringQueue::~UringQueue() {
  // Tearing the ring down cancels the poll still in flight (the owner has drained its reads).
  io_uring_queue_exit(ring_.get());
  ::close(event_fd_);
}

void UringQueue::read(int fd, uint8_t* dst, uint32_t length, uint64_t offset, uint64_t tag) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
  // The ring has room for depth() reads and the poll; more is a caller's bug.
  K3_CHECK(sqe != nullptr, "io_uring queue: more than ", depth_, " reads queued");
  io_uring_prep_read(sqe, fd, dst, length, offset);
  io_uring_sqe_set_data64(sqe, tag);
}

void UringQueue::wait(std::vector<Completion>* out) {
  if (!poll_armed_) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    K3_CHECK(sqe != nullptr, "io_uring queue: no room for the wake-up poll");
    io_uring_prep_poll_add(sqe, event_fd_, POLLIN);
    io_uring_sqe_set_data64(sqe, kWakeTag);
    poll_armed_ = true;
  }
  for (;;) {
    const int r = io_uring_submit_and_wait(ring_.get(), 1);
    if (r >= 0) break;
    if (r == -EINTR || r == -EAGAIN || r == -EBUSY) continue;  // a signal, or completions to reap first
    fail("io_uring: cannot submit reads: ", std::strerror(-r));
  }
  unsigned head = 0, seen = 0;
  io_uring_cqe* cqe = nullptr;
  io_uring_for_each_cqe(ring_.get(), head, cqe) {
    ++seen;
    const uint64_t tag = io_uring_cqe_get_data64(cqe);
    if (tag == kWakeTag) {
      // Reset the eventfd (non-blocking: wake() may not have written yet if the poll ended
      // otherwise); the next wait() re-arms the poll.
      uint64_t count = 0;
      [[maybe_unused]] const ssize_t n = ::read(event_fd_, &count, sizeof count);
      poll_armed_ = false;
      continue;
    }
    out->push_back({tag, cqe->res});
  }
  io_uring_cq_advance(ring_.get(), seen);
}

void UringQueue::wake() {
  const uint64_t one = 1;
  // Only fails when the counter would overflow, and then a wake-up is pending anyway.
  [[maybe_unused]] const ssize_t n = ::write(event_fd_, &one, sizeof one);
}

}  // namespace k3
