// HttpWorkers: jobs run on the workers, shutdown drains the queue, a throwing job does not end
// the process, and a thread limit hit partway (or at once) is a warning (or a clean error), not
// std::terminate.
#include "server/http_workers.h"

#include <atomic>
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

}  // namespace
}  // namespace k3
