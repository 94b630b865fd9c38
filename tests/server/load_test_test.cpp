// `k3 loadtest`'s library (server/load_test.h) against a tiny in-process httplib server that plays
// a k3 serve with chosen replies: bad options and URLs are errors before any request, bad replies
// (no completion_tokens, 401) are counted failures with their reason, never a crash.
#include "server/load_test.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.h"
#include "support/test_support.h"

namespace k3::server {
namespace {

// An httplib::Server on 127.0.0.1 at a free port.  /health answers health_status; completions
// answer with set_completions()'s handler (default: a stream whose usage has `completion_tokens` = 5).
class FakeServer {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  std::atomic<int> health_status{200};
  std::atomic<int> health_calls{0}, completion_calls{0};

  // Replies are changed between load tests while the server thread runs: under a lock.
  void set_completions(Handler h) {
    std::lock_guard<std::mutex> lock(mu_);
    completions_ = std::move(h);
  }

  FakeServer() {
    svr_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      ++health_calls;
      res.status = health_status.load();
      res.set_content(res.status == 200 ? "{}" : R"({"error":{"message":"still loading"}})", "application/json");
    });
    svr_.Get("/ready", [](const httplib::Request&, httplib::Response& res) { res.set_content("{}", "application/json"); });
    svr_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      ++completion_calls;
      Handler h;
      {
        std::lock_guard<std::mutex> lock(mu_);
        h = completions_;
      }
      h(req, res);
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    // The socket listens from bind on, so requests queue until the accept loop runs.
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
  }
  ~FakeServer() {
    // stop() only takes effect once the accept loop has started.
    while (!svr_.is_running()) std::this_thread::yield();
    svr_.stop();
    thread_.join();
  }
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;

  // Returns once a request has been served: the accept loop and its worker threads are running.
  void wait_ready() {
    httplib::Client cli("127.0.0.1", port_);
    while (!cli.Get("/ready")) std::this_thread::yield();
  }

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // One text chunk, then the usage chunk (`usage` as JSON), then [DONE], as k3 serve streams.
  static void stream_reply(httplib::Response& res, const std::string& usage) {
    res.set_content(std::string("data: {\"choices\":[{\"text\":\"hi\"}]}\n\n") +
                        "data: {\"choices\":[],\"usage\":" + usage + "}\n\ndata: [DONE]\n\n",
                    "text/event-stream");
  }

 private:
  std::mutex mu_;
  Handler completions_ = [](const httplib::Request&, httplib::Response& res) {
    stream_reply(res, R"({"prompt_tokens":3,"completion_tokens":5,"total_tokens":8})");
  };
  httplib::Server svr_;
  int port_ = -1;
  std::thread thread_;
};

LoadTestOptions options(const std::string& url, std::vector<int> concurrency) {
  LoadTestOptions o;
  o.url = url;
  o.concurrency = std::move(concurrency);
  o.max_tokens = 4;
  o.rounds = 2;
  return o;
}

// The message of the k3::Error run_load_test throws ("" when it throws none).
std::string load_test_error(const LoadTestOptions& o) {
  return k3::testing::error_of([&] { run_load_test(o); });
}

TEST(LoadTest, CountsTheStreamedTokensOfEveryRequest) {
  FakeServer server;
  const std::vector<LoadTestLevel> levels = run_load_test(options(server.url(), {1, 3}));
  ASSERT_EQ(levels.size(), 2u);
  EXPECT_EQ(levels[0].concurrency, 1);
  EXPECT_EQ(levels[0].requests, 2);
  EXPECT_EQ(levels[0].failed, 0);
  EXPECT_EQ(levels[0].output_tokens, 10);
  EXPECT_EQ(levels[1].requests, 6);
  EXPECT_EQ(levels[1].failed, 0);
  EXPECT_EQ(levels[1].output_tokens, 30);
  EXPECT_EQ(levels[1].first_error, "");
}

TEST(LoadTest, RejectsBadUrlsBeforeConnecting) {
  struct Case {
    const char* url;
    const char* reason;
  };
  for (const Case& c : {Case{"ftp://x", "scheme 'ftp'"}, Case{"notaurl", "no scheme"},
                        Case{"http://localhost:99999", "99999"}, Case{"http://[::1", "']'"},
                        Case{"http://", "host is empty"}, Case{"http://:8000", "host is empty"},
                        Case{"http://host:abc", "'abc'"}, Case{"http://host:0", "port 0"},
                        Case{"http://a:1:2", "more than one ':'"}, Case{"http://host:8000/v1", "path"},
                        Case{"http://ho st:8000", "'ho st'"}}) {
    const std::string msg = load_test_error(options(c.url, {1}));
    EXPECT_NE(msg.find(std::string("'") + c.url + "'"), std::string::npos) << c.url << ": " << msg;
    EXPECT_NE(msg.find(c.reason), std::string::npos) << c.url << ": " << msg;
  }
}

TEST(LoadTest, ChecksEveryConcurrencyLevelBeforeTheFirstRuns) {
  FakeServer server;
  const std::string msg = load_test_error(options(server.url(), {1, 0}));
  EXPECT_NE(msg.find("concurrency 0"), std::string::npos) << msg;
  EXPECT_NE(load_test_error(options(server.url(), {kMaxLoadTestConcurrency + 1})).find("concurrency"),
            std::string::npos);
  EXPECT_NE(load_test_error(options(server.url(), {})).find("concurrency"), std::string::npos);
  LoadTestOptions no_rounds = options(server.url(), {1});
  no_rounds.rounds = 0;
  EXPECT_NE(load_test_error(no_rounds).find("rounds"), std::string::npos);
  EXPECT_EQ(server.health_calls.load(), 0);
  EXPECT_EQ(server.completion_calls.load(), 0);
}

TEST(LoadTest, AnUnreachableServerIsNamedWithTheTransportError) {
  int port = 0;
  {
    FakeServer gone;  // a port that was just free, and is closed again
    port = gone.port();
  }
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  const std::string msg = load_test_error(options(url, {1}));
  EXPECT_NE(msg.find(url), std::string::npos) << msg;
  EXPECT_NE(msg.find("httplib error: "), std::string::npos) << msg;
}

TEST(LoadTest, AnUnhealthyServerSaysWhy) {
  FakeServer server;
  server.health_status = 503;
  const std::string msg = load_test_error(options(server.url(), {1}));
  EXPECT_NE(msg.find("HTTP 503: still loading"), std::string::npos) << msg;
  EXPECT_EQ(server.completion_calls.load(), 0);
}

TEST(LoadTest, UsageWithoutCompletionTokensIsAFailureNotACrash) {
  FakeServer server;
  server.set_completions([](const httplib::Request&, httplib::Response& res) {
    FakeServer::stream_reply(res, R"({"prompt_tokens":3})");
  });
  const std::vector<LoadTestLevel> levels = run_load_test(options(server.url(), {2}));
  ASSERT_EQ(levels.size(), 1u);
  EXPECT_EQ(levels[0].requests, 4);
  EXPECT_EQ(levels[0].failed, 4);
  EXPECT_NE(levels[0].first_error.find("completion_tokens"), std::string::npos) << levels[0].first_error;

  server.set_completions([](const httplib::Request&, httplib::Response& res) {
    FakeServer::stream_reply(res, R"({"completion_tokens":"five"})");
  });
  const std::vector<LoadTestLevel> wrong_type = run_load_test(options(server.url(), {1}));
  EXPECT_EQ(wrong_type[0].failed, 2);
  EXPECT_NE(wrong_type[0].first_error.find("completion_tokens"), std::string::npos) << wrong_type[0].first_error;
}

TEST(LoadTest, AnHttpErrorIsRecordedWithTheServersMessage) {
  FakeServer server;
  server.set_completions([](const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Authorization") != "Bearer right-key") {
      res.status = 401;
      res.set_content(R"({"error":{"message":"invalid API key","type":"invalid_request_error"}})",
                      "application/json");
      return;
    }
    FakeServer::stream_reply(res, R"({"completion_tokens":5})");
  });
  LoadTestOptions o = options(server.url(), {1, 2});
  o.api_key = "wrong-key";
  const std::vector<LoadTestLevel> levels = run_load_test(o);
  ASSERT_EQ(levels.size(), 2u);
  for (const LoadTestLevel& l : levels) {
    EXPECT_EQ(l.failed, l.requests);
    EXPECT_EQ(l.first_error, "HTTP 401: invalid API key");
  }
  o.api_key = "right-key";
  const std::vector<LoadTestLevel> ok = run_load_test(o);
  EXPECT_EQ(ok[1].failed, 0);
  EXPECT_EQ(ok[1].output_tokens, 20);
}

// In the death test's child: a level of 4000 clients with address space for a few thread stacks
// only; exits 0 on the k3::Error.  The fake server starts here too, since a fork keeps only the
// forking thread.
void start_too_many_clients() {
  FakeServer server;
  server.wait_ready();  // its worker threads exist before the limit below
  const LoadTestOptions o = options(server.url(), {4000});
  long pages = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  rlimit lim;
  lim.rlim_cur = lim.rlim_max =
      static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (512u << 20);
  if (pages == 0 || setrlimit(RLIMIT_AS, &lim) != 0) std::_Exit(2);
  const std::string msg = load_test_error(o);
  std::fprintf(stderr, "%s\n", msg.c_str());
  std::_Exit(msg.find("cannot start 4000 client threads") == 0 ? 0 : 1);
}

// Creating the clients fails part way, which used to std::terminate (started threads destroyed
// joinable).  In a forked child so the limit does not touch the other tests.
TEST(LoadTest, ClientThreadsThatCannotStartAreAnErrorNotACrash) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizers reserve more address space than the limit allows";
#endif
  EXPECT_EXIT(start_too_many_clients(), ::testing::ExitedWithCode(0), "cannot start 4000 client threads");
}

}  // namespace
}  // namespace k3::server
