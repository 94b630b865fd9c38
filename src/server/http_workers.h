// The HTTP server's worker threads: cpp-httplib's TaskQueue with threads started fail-safe, and
// more of them started on demand.
//
// httplib's own ThreadPool starts its threads one by one into a vector; when the k-th cannot
// start (a thread or pid limit, hit partway through the thousands `k3 serve` asks for: one per
// slot and per waiting request), the unwinding destroys running std::threads and the process
// ends in std::terminate.  HttpWorkers stops and joins what it started and then throws (no
// thread at all), or warns and serves with the threads it has.
//
// Each connection holds its worker until it closes or times out (httplib: 30 s without a byte
// while reading a request, 5 s idle between keep-alive requests), so a fixed pool lets a burst of
// slow or idle clients -- a hundred half-sent headers -- shut every other client out, /health
// included.  When a connection arrives while no worker is idle, HttpWorkers starts one more, up
// to max_threads (then connections wait in a queue, as before); the threads stay until shutdown.
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
  explicit HttpWorkers(size_t threads, const StartThread& start = {}) : HttpWorkers(threads, threads, start) {}
  // Starts `threads` now and grows to at most max_threads (>= threads) under load.  A thread that
  // cannot start while growing is a warning (once); the pool stops growing there.
  HttpWorkers(size_t threads, size_t max_threads, const StartThread& start = {});
  ~HttpWorkers() override;
  HttpWorkers(const HttpWorkers&) = delete;
  HttpWorkers& operator=(const HttpWorkers&) = delete;

  void enqueue(std::function<void()> fn) override;
  // Runs the queued jobs to the end, then joins every worker.  Idempotent.
  void shutdown() override;

  // Workers started so far.
  size_t threads() const;

 private:
  void work();
  std::thread start_one();

  const StartThread start_;
  size_t max_threads_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  size_t idle_ = 0;  // workers waiting for a job
  bool stop_ = false;
  std::vector<std::thread> threads_;  // grows under mu_ until stop_
};

}  // namespace k3
