// SerialWorker: every call runs on its one thread, in turn, from however many callers; results
// and exceptions come back to the caller; the destructor finishes what was handed over.
#include "base/serial_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace k3 {
namespace {

TEST(SerialWorker, ResultsAndExceptionsComeBack) {
  SerialWorker w;
  EXPECT_EQ(w.call([] { return 41 + 1; }), 42);
  std::string s = "moved";
  EXPECT_EQ(w.call([&] { return s + " back"; }), "moved back");
  w.call([&] { s = "written there"; });  // void results too
  EXPECT_EQ(s, "written there");
  EXPECT_THROW(w.call([]() -> int { throw std::runtime_error("from the worker"); }), std::runtime_error);
  EXPECT_EQ(w.call([] { return 7; }), 7);  // an exception does not end the worker
}

TEST(SerialWorker, ManyCallersOneThreadOneCallAtATime) {
  SerialWorker w;
  const std::thread::id caller = std::this_thread::get_id();
  std::set<std::thread::id> ran_on;  // touched by the worker only
  std::atomic<int> inside{0}, most_inside{0}, total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 16; ++c)
    callers.emplace_back([&, c] {
      for (int i = 0; i < 50; ++i) {
        const int got = w.call([&] {
          const int now = ++inside;
          most_inside = std::max(most_inside.load(), now);
          ran_on.insert(std::this_thread::get_id());
          --inside;
          return c * 1000 + i;
        });
        EXPECT_EQ(got, c * 1000 + i);
        ++total;
      }
    });
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 16 * 50);
  EXPECT_EQ(most_inside.load(), 1);
  ASSERT_EQ(ran_on.size(), 1u);
  EXPECT_NE(*ran_on.begin(), caller);
}

TEST(SerialWorker, UnusedAndUsedWorkersStopCleanly) {
  { SerialWorker idle; }
  std::atomic<int> done{0};
  {
    SerialWorker w;
    std::thread t([&] { w.call([&] { ++done; }); });
    t.join();
  }
  EXPECT_EQ(done.load(), 1);
}

}  // namespace
}  // namespace k3
