// The HTTP server's worker threads: cpp-httplib's TaskQueue with threads started fail-safe.
//
// httplib's own ThreadPool starts its threads one by one into a vector; when the k-th cannot
// start (a thread or pid limit, hit partway through the thousands `k3 serve` asks for: one per
// slot and per waiting request), the unwinding destroys running std::threads and the process
// ends in std::terminate.  HttpWorkers stops and joins what it started and then throws (no
// thread at all), or warns and serves with the threads it has.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace k3 {

class HttpWorkers : public httplib::TaskQueue {
 public:
  // Starts up to `threads` (>= 1) workers.  Throws k3::Error when not even one starts; logs a
  // warning naming both counts when only some do.  `start` stands in for std::thread's
  // constructor in tests (it may throw std::system_error).
  using StartThread = std::function<std::thread(std::function<void()>)>;
  explicit HttpWorkers(size_t threads, const StartThread& start = {});
  ~HttpWorkers() override;
  HttpWorkers(const HttpWorkers&) = delete;
  HttpWorkers& operator=(const HttpWorkers&) = delete;

  void enqueue(std::function<void()> fn) override;
  // Runs the queued jobs to the end, then joins every worker.  Idempotent.
  void shutdown() override;

  size_t threads() const { return threads_.size(); }

 private:
  void work();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace k3
