// `mpirun -np R k3 serve` and `k3 chat`: rank 0 runs the front and the scheduler, the other
// ranks follow each step (model/state_mirror.h).  Every answer must be the one-process answer:
// greedy and sampled replies, n > 1, an image, a streamed reply, a prefix-cache hit, and
// requests decoded together; a rank killed mid-reply ends the job and the client's request
// with an error, not silence.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "server/server_test_util.h"
#include "rank_process.h"
#include "support/test_support.h"

namespace k3 {
namespace {

using testing::ojson;
using testing::ServerProcess;

std::vector<std::string> mpirun(int ranks) {
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  ::setenv("K3_THREADS", "1", 1);
  ::setenv("K3_TEST_SERVE_TAG", "none", 0);  // set by the test that looks for a rank
  // Under AddressSanitizer, no leak check for the ranks (tests/dist/CMakeLists.txt).
  const char* asan = std::getenv("ASAN_OPTIONS");
  ::setenv("ASAN_OPTIONS", (std::string(asan != nullptr ? asan : "") + ":detect_leaks=0").c_str(), 1);
  return {K3_MPIEXEC, "--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1",
          "--mca", "btl", "self,vader", "-x", "K3_TEST_SERVE_TAG", "-np", std::to_string(ranks)};
}

std::vector<std::string> serve_args() {
  return {"--model", testing::vision_model_dir(), "--served-model-name", "m", "--max-image-pixels", "4000000",
          "--prefill-chunk", "16"};  // prompts pass chunk boundaries: the prefix cache stores them
}

// What must agree between two servers: the choices and the usage.
ojson answer(const testing::Reply& r) {
  ojson a;
  a["status"] = r.status;
  a["choices"] = r["choices"];
  a["usage"] = r["usage"];
  return a;
}

std::vector<ojson> requests() {
  auto user = [](ojson content) { return ojson::array({{{"role", "user"}, {"content", std::move(content)}}}); };
  std::vector<ojson> out;
  out.push_back({{"model", "m"}, {"messages", user("Hello there")}, {"max_tokens", 24}, {"temperature", 0}});
  out.push_back({{"model", "m"}, {"messages", user("Hello there")}, {"max_tokens", 24}, {"temperature", 0}});  // cached
  out.push_back({{"model", "m"}, {"messages", user("Tell me more")}, {"max_tokens", 20}, {"temperature", 0.9},
                 {"seed", 11}, {"n", 2}});
  out.push_back({{"model", "m"},
                 {"messages", user(ojson::array({{{"type", "text"}, {"text", "What is this?"}},
                                                 {{"type", "image_url"},
                                                  {"image_url", {{"url", testing::png_data_url(40, 30, 3)}}}}}))},
                 {"max_tokens", 16}, {"temperature", 0}});
  return out;
}

TEST(MpirunServe, AnswersAreTheOneProcessAnswers) {
  std::vector<ojson> want;
  {
    ServerProcess one(serve_args());
    httplib::Client cli = testing::client(one);
    for (const ojson& req : requests()) want.push_back(answer(testing::post(cli, "/v1/chat/completions", req)));
  }
  ServerProcess ranks(serve_args(), mpirun(2));
  httplib::Client cli = testing::client(ranks);
  const std::vector<ojson> reqs = requests();
  for (size_t i = 0; i < reqs.size(); ++i) {
    const ojson got = answer(testing::post(cli, "/v1/chat/completions", reqs[i]));
    EXPECT_EQ(got["status"], 200) << got.dump();
    EXPECT_EQ(got, want[i]) << "request " << i;
  }
  EXPECT_GT(want[1]["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);  // the prefix cache was used
  // Streamed: the same text as the non-streamed greedy reply.
  ojson req = reqs[0];
  req["stream"] = true;
  const testing::Sse sse = testing::post_sse(cli, "/v1/chat/completions", req);
  EXPECT_TRUE(sse.done);
  std::string text;
  for (const ojson& e : sse.events)
    if (e.contains("choices") && !e["choices"].empty()) {
      const ojson& d = e["choices"][0]["delta"];
      for (const char* k : {"content", "reasoning_content"})
        if (d.contains(k) && d[k].is_string()) text += d[k].get<std::string>();
    }
  const ojson& m = want[0]["choices"][0]["message"];
  std::string whole;
  for (const char* k : {"reasoning_content", "content"})
    if (m.contains(k) && m[k].is_string()) whole += m[k].get<std::string>();
  EXPECT_EQ(text, whole);
}

TEST(MpirunServe, RequestsDecodedTogetherMatchOneProcess) {
  auto prompt = [](int i) {
    return ojson{{"model", "m"},
                 {"messages", ojson::array({{{"role", "user"}, {"content", "Question " + std::to_string(i)}}})},
                 {"max_tokens", 12 + 3 * i},
                 {"temperature", 0}};
  };
  std::vector<ojson> want;
  {
    ServerProcess one(serve_args());
    httplib::Client cli = testing::client(one);
    for (int i = 0; i < 4; ++i) want.push_back(answer(testing::post(cli, "/v1/chat/completions", prompt(i))));
  }
  ServerProcess ranks(serve_args(), mpirun(3));
  std::vector<std::future<ojson>> got;
  for (int i = 0; i < 4; ++i)
    got.push_back(std::async(std::launch::async, [&, i] {
      httplib::Client cli = testing::client(ranks);
      return answer(testing::post(cli, "/v1/chat/completions", prompt(i)));
    }));
  // The replies agree; the cached-token counts may not (the one-process requests ran one by one).
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(got[static_cast<size_t>(i)].get()["choices"], want[static_cast<size_t>(i)]["choices"]) << i;
}


TEST(MpirunServe, AFollowerKilledMidReplyFailsTheRequest) {
  const std::string tag = "serve" + std::to_string(::getpid());
  ::setenv("K3_TEST_SERVE_TAG", tag.c_str(), 1);
  ServerProcess ranks(serve_args(), mpirun(2));
  const pid_t follower = testing::rank_pid("K3_TEST_SERVE_TAG=" + tag, 1);
  ASSERT_GT(follower, 0);
  std::thread killer([follower] {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    ::kill(follower, SIGKILL);
  });
  httplib::Client cli = testing::client(ranks);
  cli.set_read_timeout(60, 0);
  const auto t0 = std::chrono::steady_clock::now();
  const ojson req = {{"model", "m"},
                     {"messages", ojson::array({{{"role", "user"}, {"content", "Go on and on"}}})},
                     {"max_tokens", 4000},
                     {"temperature", 0},
                     {"stream", true}};
  const testing::Sse sse = testing::post_sse(cli, "/v1/chat/completions", req);
  killer.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(sse.done) << "the reply ended normally although a rank died";
  EXPECT_LT(secs, 30);
  EXPECT_NE(ranks.stop(), 0);  // the job ended with an error
}

}  // namespace
}  // namespace k3
