// One thread that runs, in turn, the calls other threads hand it, and hands back each result or
// exception.
//
// The kernels keep per-thread scratch (thread_local packing and accumulator buffers, sized by the
// largest product a thread has run), which is right for the thread pool's few workers but not for
// the hundreds of HTTP worker threads a server keeps: each that once encoded an image would hold
// its own copy for the life of the process, and resident memory would grow with the number of
// threads that happened to take such a request.  Work routed through a SerialWorker keeps one
// copy.  The kernels' thread pool serialises jobs across callers anyway (ThreadPool::run), so
// nothing is lost in throughput.  The thread starts on the first call.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>

namespace k3 {

class SerialWorker {
 public:
  SerialWorker() = default;
  ~SerialWorker();  // runs the calls already handed over, then joins
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  // Runs f() on the worker thread and returns its result (or rethrows its exception) here.
  // Throws k3::Error once the worker is stopping, or when its thread cannot start.
  template <class F>
  std::invoke_result_t<F&> call(F&& f) {
    using R = std::invoke_result_t<F&>;
    // Shared with the job, so the task outlives its run even after the caller has its result.
    auto task = std::make_shared<std::packaged_task<R()>>([&f]() -> R { return f(); });
    std::future<R> result = task->get_future();
    submit([task] { (*task)(); });
    return result.get();
  }

 private:
  void submit(std::function<void()> job);
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;  // started by the first submit()
};

}  // namespace k3
