// A persistent pool of worker threads for data-parallel kernels.
//
// run(n, fn) calls fn(task) for every task in [0, n) and returns when all are done.  Tasks are
// claimed from a shared counter by the caller and by whichever workers are awake, so a worker
// that is descheduled (more threads than cores, or another busy process) never stalls the job:
// the others simply take its share.  Kernels partition by rows, experts or heads and their
// results never depend on which thread ran a task.  Idle workers spin briefly (only when the
// pool is not oversubscribed), then sleep on a futex.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace k3 {

class ThreadPool {
 public:
  // More threads than this is a typo or a misread setting, not a useful pool: a kernel's tasks
  // are split a few per thread, and thousands of threads only add switching and memory.
  static constexpr int kMaxThreads = 1024;

  // threads = 0: one per CPU this process may run on.  pin: bind thread i to CPU i.  Throws
  // k3::Error for a count outside [0, kMaxThreads] or when the threads cannot be started.
  explicit ThreadPool(int threads = 0, bool pin = false);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }  // workers + the caller

  // fn(task, thread) for task in [0, tasks); the calling thread takes part.  A task that calls
  // run() again runs that inner job inline.  If fn throws (on any thread), the tasks not yet
  // started are skipped, run() waits for those in flight and then rethrows the first exception
  // on the calling thread; the pool stays usable.
  void run(int64_t tasks, const std::function<void(int64_t task, int thread)>& fn);

  // Splits [0, n) into contiguous pieces aligned to `align` (a few per thread) and calls
  // fn(begin, end, thread) for each.
  void parallel_for(int64_t n, int64_t align, const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  struct Job {
    const std::function<void(int64_t, int)>* fn = nullptr;
    int64_t tasks = 0;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::atomic<bool> failed{false};  // a task threw: the rest are skipped
    std::mutex error_mutex;
    std::exception_ptr error;  // the first exception, rethrown by run()
  };
  static void work_on(Job& job, int thread);
  void worker_loop(int index);
  void stop_workers();  // wakes, stops and joins every worker

  std::vector<std::thread> workers_;
  std::mutex job_mutex_;  // guards current_
  std::shared_ptr<Job> current_;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<bool> stop_{false};
  int spin_iters_ = 0;
  std::mutex run_mutex_;  // one job at a time across caller threads
};

// Whether this thread is running a pool task (a worker, or a caller inside run()) or is under a
// SerialScope: work started here runs inline, on this thread alone.
bool in_pool_task();

// While alive, pool jobs started from this thread run inline on it (for callers that already
// parallelise at a coarser grain, e.g. one task per attention head).
class SerialScope {
 public:
  SerialScope();
  ~SerialScope();
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  bool saved_;
};

// Number of CPUs this process may run on (sched_getaffinity), at least 1.
int available_cpus();

// The thread count K3_THREADS asks for: 0 when unset or empty (one per CPU).  Throws k3::Error
// naming K3_THREADS and its value when it is not a whole number in [0, ThreadPool::kMaxThreads].
int threads_from_env();

// The process-wide pool the kernels use; created on first use with set_num_threads()'s value
// (default: available_cpus(), or K3_THREADS).  Throws k3::Error as threads_from_env() and the
// ThreadPool constructor do.
ThreadPool& global_pool();
// Replaces the global pool (call before heavy work starts, not while kernels run).  On an error
// (see ThreadPool's constructor) the old pool stays.
void set_num_threads(int threads, bool pin = false);

}  // namespace k3
