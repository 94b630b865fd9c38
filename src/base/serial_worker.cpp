#include "base/serial_worker.h"

#include <exception>

#include "base/error.h"

namespace k3 {

SerialWorker::~SerialWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SerialWorker::submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    K3_CHECK(!stop_, "the worker thread is stopping");
    if (!thread_.joinable()) {
      try {
        thread_ = std::thread([this] { loop(); });
      } catch (const std::exception& e) {
        fail("cannot start a worker thread: ", e.what());
      }
    }
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void SerialWorker::loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and nothing left to run
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();  // a packaged_task: its exception goes to the caller's future
  }
}

}  // namespace k3
