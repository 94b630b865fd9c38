#include "server/http_workers.h"

#include <exception>
#include <system_error>
#include <utility>

#include "base/error.h"
#include "base/log.h"

namespace k3 {

HttpWorkers::HttpWorkers(size_t threads, size_t max_threads, const StartThread& start)
    : start_(start), max_threads_(max_threads) {
  K3_CHECK(threads >= 1, "the HTTP server needs at least one worker thread");
  K3_CHECK(max_threads >= threads, "the HTTP worker limit (", max_threads, ") is below the ", threads,
           " threads to start");
  std::string error;
  {
    std::lock_guard<std::mutex> lock(mu_);  // the workers read threads_ only under it, too
    threads_.reserve(threads);
    for (size_t i = 0; i < threads; ++i) {
      try {
        threads_.push_back(start_one());
      } catch (const std::exception& e) {
        error = e.what();
        break;
      }
    }
    if (threads_.size() < threads) max_threads_ = threads_.size();
  }
  if (threads_.size() == threads) return;
  if (threads_.empty()) fail("cannot start any of ", threads, " HTTP worker threads: ", error);
  log_warn("started only ", threads_.size(), " of ", threads, " HTTP worker threads (", error,
           "): concurrent requests beyond that wait for a thread; lower --max-batch / --max-queue or "
           "raise the thread limit (ulimit -u)");
}

HttpWorkers::~HttpWorkers() { shutdown(); }

std::thread HttpWorkers::start_one() {
  return start_ ? start_([this] { work(); }) : std::thread([this] { work(); });
}

size_t HttpWorkers::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_.size();
}

void HttpWorkers::enqueue(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(fn));
    // Every idle worker takes one queued job; a job beyond them gets a new worker.
    if (!stop_ && jobs_.size() > idle_ && threads_.size() < max_threads_) {
      try {
        threads_.push_back(start_one());
      } catch (const std::exception& e) {
        log_warn("cannot start HTTP worker thread ", threads_.size() + 1, " (", e.what(), "): serving with ",
                 threads_.size(), "; further connections wait for a free one");
        max_threads_ = threads_.size();
      }
    }
  }
  cv_.notify_one();
}

void HttpWorkers::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;  // threads_ grows no more
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
      ++idle_;
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      --idle_;
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
