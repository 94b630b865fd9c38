#include "server/http_workers.h"

#include <exception>
#include <system_error>
#include <utility>

#include "base/error.h"
#include "base/log.h"

namespace k3 {

HttpWorkers::HttpWorkers(size_t threads, const StartThread& start) {
  K3_CHECK(threads >= 1, "the HTTP server needs at least one worker thread");
  threads_.reserve(threads);
  std::string error;
  for (size_t i = 0; i < threads; ++i) {
    try {
      threads_.push_back(start ? start([this] { work(); }) : std::thread([this] { work(); }));
    } catch (const std::exception& e) {
      error = e.what();
      break;
    }
  }
  if (threads_.size() == threads) return;
  if (threads_.empty()) fail("cannot start any of ", threads, " HTTP worker threads: ", error);
  log_warn("started only ", threads_.size(), " of ", threads, " HTTP worker threads (", error,
           "): concurrent requests beyond that wait for a thread; lower --max-batch / --max-queue or "
           "raise the thread limit (ulimit -u)");
}

HttpWorkers::~HttpWorkers() { shutdown(); }

void HttpWorkers::enqueue(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(fn));
  }
  cv_.notify_one();
}

void HttpWorkers::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

void HttpWorkers::work() {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and nothing left to run
      fn = std::move(jobs_.front());
      jobs_.pop_front();
    }
    try {
      fn();
    } catch (const std::exception& e) {  // a connection's fault must not end the process
      log_warn("HTTP worker: ", e.what());
    } catch (...) {
      log_warn("HTTP worker: unknown exception");
    }
  }
}

}  // namespace k3
