#include "base/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "base/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace k3 {

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc > 0 ? static_cast<int>(hc) : 1;
}

namespace {

thread_local bool t_in_pool_task = false;  // set on workers and on a caller inside run()

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

void pin_to_cpu(std::thread::native_handle_type h, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu % CPU_SETSIZE, &set);
  pthread_setaffinity_np(h, sizeof set, &set);
}

}  // namespace

ThreadPool::ThreadPool(int threads, bool pin) {
  K3_CHECK(threads >= 0, "thread count must be >= 0 (0 = one per CPU), got ", threads);
  K3_CHECK(threads <= kMaxThreads, "thread count ", threads, " is too large (at most ", kMaxThreads, ")");
  const int cpus = available_cpus();
  if (threads == 0) threads = std::min(cpus, kMaxThreads);
  // Spinning only pays when every thread has a core of its own.
  spin_iters_ = threads <= cpus ? 20000 : 0;
  if (pin) pin_to_cpu(pthread_self(), 0);
  try {
    workers_.reserve(static_cast<size_t>(threads - 1));
    for (int i = 1; i < threads; ++i) {
      workers_.emplace_back([this, i] { worker_loop(i); });
      if (pin) pin_to_cpu(workers_.back().native_handle(), i);
    }
  } catch (const std::exception& e) {
    // The destructor does not run for a constructor that throws, and destroying a joinable
    // std::thread calls std::terminate: stop and join the workers already running first.
    stop_workers();
    fail("cannot start ", threads, " threads: ", e.what());
  }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
  stop_.store(true);
  epoch_.fetch_add(1);
  epoch_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::work_on(Job& job, int thread) {
  for (;;) {
    const int64_t t = job.next.fetch_add(1, std::memory_order_relaxed);
    if (t >= job.tasks) return;
    // An exception must not leave a worker's loop (std::terminate) nor the caller's run() while
    // workers still run tasks that use the caller's stack: it is kept, and the task still counts
    // as done.  (Published to run() by the acq_rel increment below.)
    if (!job.failed.load(std::memory_order_relaxed)) {
      try {
        (*job.fn)(t, thread);
      } catch (...) {
        std::lock_guard<std::mutex> lock(job.error_mutex);
        if (!job.error) job.error = std::current_exception();
        job.failed.store(true, std::memory_order_relaxed);
      }
    }
    if (job.done.fetch_add(1, std::memory_order_acq_rel) + 1 == job.tasks) job.done.notify_all();
  }
}

void ThreadPool::worker_loop(int index) {
  t_in_pool_task = true;
  uint64_t seen = 0;
  for (;;) {
    uint64_t e = epoch_.load(std::memory_order_acquire);
    for (int i = 0; e == seen && i < spin_iters_; ++i) {
      cpu_relax();
      e = epoch_.load(std::memory_order_acquire);
    }
    while (e == seen) {
      epoch_.wait(seen, std::memory_order_acquire);
      e = epoch_.load(std::memory_order_acquire);
    }
    seen = e;
    if (stop_.load()) return;
    std::shared_ptr<Job> job;
    {
      std::lock_guard<std::mutex> lock(job_mutex_);
      job = current_;
    }
    // A late worker may find an old, finished job: claiming fails and it goes back to sleep.
    if (job) work_on(*job, index);
  }
}

void ThreadPool::run(int64_t tasks, const std::function<void(int64_t, int)>& fn) {
  if (tasks <= 0) return;
  if (workers_.empty() || tasks == 1 || t_in_pool_task) {  // nested calls run inline
    for (int64_t t = 0; t < tasks; ++t) fn(t, 0);
    return;
  }
  std::lock_guard<std::mutex> lock(run_mutex_);
  t_in_pool_task = true;
  struct Leave {  // however run() ends, later jobs from this thread use the workers again
    ~Leave() { t_in_pool_task = false; }
  } leave;
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->tasks = tasks;
  {
    std::lock_guard<std::mutex> jl(job_mutex_);
    current_ = job;
  }
  epoch_.fetch_add(1, std::memory_order_release);
  epoch_.notify_all();
  work_on(*job, 0);
  int64_t done = job->done.load(std::memory_order_acquire);
  for (int i = 0; done != tasks && i < spin_iters_; ++i) {
    cpu_relax();
    done = job->done.load(std::memory_order_acquire);
  }
  while (done != tasks) {
    job->done.wait(done, std::memory_order_acquire);
    done = job->done.load(std::memory_order_acquire);
  }
  if (job->failed.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> el(job->error_mutex);
    std::rethrow_exception(job->error);
  }
}

bool in_pool_task() { return t_in_pool_task; }

SerialScope::SerialScope() : saved_(t_in_pool_task) { t_in_pool_task = true; }
SerialScope::~SerialScope() { t_in_pool_task = saved_; }

void ThreadPool::parallel_for(int64_t n, int64_t align, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  const int64_t parts = size() == 1 ? 1 : 4 * static_cast<int64_t>(size());
  const int64_t a = align > 0 ? align : 1;
  const int64_t units = (n + a - 1) / a;
  run(parts, [&](int64_t p, int thread) {
    const int64_t b = units * p / parts * a, e = std::min(n, units * (p + 1) / parts * a);
    if (b < e) fn(b, e, thread);
  });
}

namespace {

std::mutex& pool_mutex() {
  static std::mutex mu;
  return mu;
}
std::unique_ptr<ThreadPool>& pool_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
std::atomic<ThreadPool*> g_pool{nullptr};

}  // namespace

int threads_from_env() {
  const char* env = std::getenv("K3_THREADS");
  // An empty value counts as unset, as it does for most variables a shell exports.
  if (env == nullptr || *env == '\0') return 0;
  const std::string_view text(env);
  int n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  K3_CHECK(ec != std::errc::invalid_argument && end == text.data() + text.size() && n >= 0,
           "K3_THREADS must be a whole number >= 0 (0 = one per CPU), got '", text, "'");
  K3_CHECK(ec != std::errc::result_out_of_range && n <= ThreadPool::kMaxThreads, "K3_THREADS='", text,
           "' is too many threads (at most ", ThreadPool::kMaxThreads, ")");
  return n;
}

ThreadPool& global_pool() {
  if (ThreadPool* p = g_pool.load(std::memory_order_acquire)) return *p;
  std::lock_guard<std::mutex> lock(pool_mutex());
  auto& slot = pool_slot();
  if (!slot) {
    // A bad K3_THREADS or a failed thread start throws and leaves no pool: the next call
    // reports the same error instead of silently running with some other count.
    slot = std::make_unique<ThreadPool>(threads_from_env());
    g_pool.store(slot.get(), std::memory_order_release);
  }
  return *slot;
}

void set_num_threads(int threads, bool pin) {
  std::lock_guard<std::mutex> lock(pool_mutex());
  // Built before the old pool goes, so a count that cannot be had leaves the old pool in place.
  auto fresh = std::make_unique<ThreadPool>(threads, pin);
  g_pool.store(nullptr);
  pool_slot() = std::move(fresh);
  g_pool.store(pool_slot().get(), std::memory_order_release);
}

}  // namespace k3
