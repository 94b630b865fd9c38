// The thread pool: every task runs exactly once, static assignment, nesting, oversubscription.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "base/thread_pool.h"

namespace k3 {
namespace {

TEST(ThreadPool, EveryTaskRunsOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t tasks : {0, 1, 2, 7, 100}) {
      std::vector<std::atomic<int>> count(tasks);
      std::vector<int> owner(tasks, -1);
      pool.run(tasks, [&](int64_t t, int thread) {
        count[t]++;
        owner[t] = thread;
      });
      for (int64_t t = 0; t < tasks; ++t) {
        EXPECT_EQ(count[t].load(), 1);
        EXPECT_GE(owner[t], 0);
        EXPECT_LT(owner[t], threads);
      }
    }
  }
}

// A thread stuck in one task must not hold back the others' share: task 0 waits until every
// other task has finished, which only completes if the remaining tasks are taken by others.
TEST(ThreadPool, ABlockedThreadsShareIsTakenByTheOthers) {
  ThreadPool pool(2);
  const int64_t tasks = 64;
  std::atomic<int64_t> finished{0};
  pool.run(tasks, [&](int64_t t, int) {
    if (t == 0) {
      while (finished.load() != tasks - 1) std::this_thread::yield();
    }
    finished++;
  });
  EXPECT_EQ(finished.load(), tasks);
}

TEST(ThreadPool, ParallelForCoversTheRangeInAlignedPieces) {
  ThreadPool pool(3);
  for (int64_t n : {1, 5, 64, 1000}) {
    std::vector<int> hit(n, 0);
    pool.parallel_for(n, 4, [&](int64_t b, int64_t e, int) {
      EXPECT_EQ(b % 4, 0);
      for (int64_t i = b; i < e; ++i) hit[i]++;
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hit[i], 1) << n << " " << i;
  }
}

TEST(ThreadPool, NestedRunExecutesInline) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.run(4, [&](int64_t, int) { pool.run(3, [&](int64_t, int) { inner++; }); });
  EXPECT_EQ(inner.load(), 12);
}

TEST(ThreadPool, OversubscribedPoolStillCompletesManyJobs) {
  ThreadPool pool(4 * available_cpus());
  std::atomic<int64_t> sum{0};
  for (int j = 0; j < 2000; ++j) pool.run(pool.size(), [&](int64_t t, int) { sum += t; });
  const int64_t n = pool.size();
  EXPECT_EQ(sum.load(), 2000 * n * (n - 1) / 2);
}

TEST(ThreadPool, GlobalPoolCanBeResized) {
  set_num_threads(3);
  EXPECT_EQ(global_pool().size(), 3);
  set_num_threads(0);
  EXPECT_EQ(global_pool().size(), available_cpus());
}

}  // namespace
}  // namespace k3
