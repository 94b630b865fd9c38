// A persistent pool of worker threads for data-parallel kernels.
//
// run(n, fn) calls fn(task) for every task in [0, n) and returns when all are done; tasks are
// split statically (task i goes to thread i % threads), so callers that partition by rows,
// experts or heads get a fixed, reproducible assignment.  Idle workers spin briefly (only when
// the pool is not oversubscribed) and then sleep on a futex, so running with more threads than
// cores, or beside another busy process, degrades gracefully instead of collapsing.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace k3 {

class ThreadPool {
 public:
  // threads = 0: one per CPU this process may run on.  pin: bind thread i to CPU i.
  explicit ThreadPool(int threads = 0, bool pin = false);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }  // workers + the caller

  // fn(task, thread) for task in [0, tasks); the calling thread takes part.  Not reentrant:
  // a task that calls run() again runs that inner job
  // inline.  fn must not throw.
  void run(int64_t tasks, const std::function<void(int64_t task, int thread)>& fn);

  // Splits [0, n) into size() contiguous ranges (aligned to `align`) and calls fn(begin, end, thread).
  void parallel_for(int64_t n, int64_t align, const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  const std::function<void(int64_t, int)>* job_ = nullptr;
  int64_t tasks_ = 0;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  int spin_iters_ = 0;
  std::mutex run_mutex_;
};

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

// The process-wide pool the kernels use; created on first use with set_num_threads()'s value
// (default: available_cpus(), or K3_THREADS).
ThreadPool& global_pool();
// Replaces the global pool (call before heavy work starts, not while kernels run).
void set_num_threads(int threads, bool pin = false);

}  // namespace k3
