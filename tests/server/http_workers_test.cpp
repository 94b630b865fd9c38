// HttpWorkers: jobs run on the workers, shutdown drains the queue, a throwing job does not end
// the process, a thread limit hit partway (or at once) is a warning (or a clean error), not
// std::terminate, and jobs held by slow clients make the pool grow (up to its limit) rather than
// keep later ones waiting.
#include "server/http_workers.h"

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <system_error>

#include <gtest/gtest.h>

#include "support/test_support.h"

namespace k3 {
namespace {

TEST(HttpWorkers, RunsEveryJobAndDrainsOnShutdown) {
  HttpWorkers w(3);
  EXPECT_EQ(w.threads(), 3u);
  std::atomic<int> done{0};
  for (int i = 0; i < 200; ++i) w.enqueue([&] { done.fetch_add(1); });
  w.enqueue([] { throw std::runtime_error("a connection's fault"); });  // logged, the worker goes on
  for (int i = 0; i < 50; ++i) w.enqueue([&] { done.fetch_add(1); });
  w.shutdown();
  EXPECT_EQ(done.load(), 250);
  w.shutdown();  // idempotent
}

// A thread limit that strikes after k threads: those k serve; none at all: a clean error.
TEST(HttpWorkers, ThreadLimitIsNotATerminate) {
  int started = 0;
  const HttpWorkers::StartThread limited = [&](std::function<void()> fn) {
    if (started == 2) throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
    ++started;
    return std::thread(std::move(fn));
  };
  HttpWorkers some(8, limited);
  EXPECT_EQ(some.threads(), 2u);
  std::atomic<int> done{0};
  for (int i = 0; i < 20; ++i) some.enqueue([&] { done.fetch_add(1); });
  some.shutdown();
  EXPECT_EQ(done.load(), 20);

  started = 2;
  const std::string err = testing::error_of([&] { HttpWorkers none(4, limited); });
  EXPECT_NE(err.find("cannot start any of 4 HTTP worker threads"), std::string::npos) << err;
  EXPECT_NE(testing::error_of([] { HttpWorkers zero(0); }).find("at least one"), std::string::npos);
}

// Jobs that hold their worker (a client sending slowly) do not keep a later job waiting: the pool
// starts a worker for it, up to max_threads; past that, jobs queue until a worker is free.
TEST(HttpWorkers, GrowsWhileEveryWorkerIsHeld) {
  HttpWorkers w(1, 3);
  EXPECT_EQ(w.threads(), 1u);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> held{0};
  std::promise<void> all_held;
  for (int i = 0; i < 3; ++i)
    w.enqueue([&, released] {
      if (held.fetch_add(1) == 2) all_held.set_value();
      released.wait();
    });
  // Three jobs block at once only if three workers run them (a fixed pool of one would not get here).
  ASSERT_EQ(all_held.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(w.threads(), 3u);
  std::promise<void> fourth;
  w.enqueue([&] { fourth.set_value(); });  // beyond the limit: waits for a worker
  EXPECT_EQ(w.threads(), 3u);
  release.set_value();
  EXPECT_EQ(fourth.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  w.shutdown();
  EXPECT_EQ(w.threads(), 3u);
}

// A thread that cannot start while growing is a warning: the jobs still run on the workers there are.
TEST(HttpWorkers, GrowthHittingTheThreadLimitServesWithWhatItHas) {
  int started = 0;
  const HttpWorkers::StartThread limited = [&](std::function<void()> fn) {
    if (started == 1) throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
    ++started;
    return std::thread(std::move(fn));
  };
  HttpWorkers w(1, 8, limited);
  std::promise<void> release, first_running;
  std::shared_future<void> released = release.get_future().share();
  w.enqueue([&, released] {
    first_running.set_value();
    released.wait();
  });
  first_running.get_future().wait();
  std::atomic<int> done{0};
  for (int i = 0; i < 5; ++i) w.enqueue([&] { done.fetch_add(1); });
  EXPECT_EQ(w.threads(), 1u);
  release.set_value();
  w.shutdown();
  EXPECT_EQ(done.load(), 5);
  EXPECT_NE(testing::error_of([] { HttpWorkers bad(4, 2); }).find("below the 4 threads"), std::string::npos);
}

}  // namespace
}  // namespace k3
