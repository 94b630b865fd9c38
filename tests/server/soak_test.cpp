// The short soak of CI (server/soak.h, `k3 loadtest --soak`): the built `k3 serve` on the tiny
// synthetic models under 64 clients of mixed, dropped and bad requests.  Every request must be
// accounted for by the client and by the server's /metrics ledger, nothing unexpected may come
// back, the server must stay up and stop cleanly, and its resident memory must stay within the
// bound after the warm-up.  The long soak is run by hand: k3 loadtest --soak 30m.
#include "server/soak.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "base/error.h"
#include "server_test_util.h"
#include "support/test_support.h"

namespace k3::testing {
namespace {

using server::SoakKind;
using server::SoakOptions;
using server::SoakResult;

const server::SoakKindStats& kind(const SoakResult& r, SoakKind k) { return r.kinds[static_cast<size_t>(k)]; }

// The server's options for a soak: room in the queue for 64 clients with up to 3 choices each
// (a 429 would be an unexpected result), a 1 MiB body limit (the oversized requests send 1 MiB +
// 64 KiB, not 32 MiB), and a short context so that prompts longer than it stay small.
std::vector<std::string> soak_server_args(const std::string& model) {
  return {"--model", model, "--served-model-name", "m", "--max-queue", "256", "--max-body-mb", "1", "--ctx", "1024"};
}

// Built with AddressSanitizer (k3 serve too, from the same build), freed memory waits in ASan's
// quarantine (256 MiB by default) before it is reused, so resident memory grows by up to that much
// whatever the server does: the bound then only catches gross growth.
#if defined(__SANITIZE_ADDRESS__)
constexpr uint64_t kRssGrowthBound = 1024ull << 20;
#else
constexpr uint64_t kRssGrowthBound = 64ull << 20;
#endif

SoakOptions soak_options(const ServerProcess& s, double seconds, int clients) {
  SoakOptions o;
  o.rss_growth_bound_bytes = kRssGrowthBound;
  o.url = s.base_url();
  o.duration_s = seconds;
  o.concurrency = clients;
  o.seed = 20261207;
  o.max_tokens = 8;
  o.max_body_bytes = 1u << 20;
  return o;
}

TEST(Soak, SixtyFourClientsOnAVisionModelAreAllAccountedFor) {
  ServerProcess s(soak_server_args(vision_model_dir()));
  const SoakResult r = server::run_soak(soak_options(s, 20, 64));
  const std::string report = server::soak_report(r);
  std::printf("%s", report.c_str());
  EXPECT_TRUE(r.passed()) << report;
  EXPECT_EQ(r.total().unexpected, 0u) << report;
  // The identity itself, not only the soak's verdict on it.
  ASSERT_TRUE(r.ledger_read) << report;
  EXPECT_EQ(r.received, r.total().sent);
  EXPECT_EQ(r.received, r.completed + r.cancelled + r.server_rejected_total());
  EXPECT_EQ(r.server_rejected, r.total().rejected);
  // The mix reached every kind, and each kind ended the way it must.
  for (int k = 0; k < server::kSoakKinds; ++k)
    EXPECT_GT(r.kinds[static_cast<size_t>(k)].sent, 0u) << server::soak_kind_name(static_cast<SoakKind>(k));
  for (SoakKind k : {SoakKind::kChat, SoakKind::kChatStream, SoakKind::kTools, SoakKind::kChoices, SoakKind::kImage,
                     SoakKind::kJsonSchema})
    EXPECT_EQ(kind(r, k).ok, kind(r, k).sent) << server::soak_kind_name(k) << "\n" << report;
  EXPECT_GT(kind(r, SoakKind::kDisconnectStream).disconnected, 0u) << report;
  EXPECT_GT(r.cancelled, 0u) << "dropped streams must reach the server as cancelled requests\n" << report;
  EXPECT_EQ(kind(r, SoakKind::kMalformedJson).rejected.count(400) ? kind(r, SoakKind::kMalformedJson).rejected.at(400) : 0,
            kind(r, SoakKind::kMalformedJson).sent);
  EXPECT_EQ(kind(r, SoakKind::kUnknownModel).rejected.count(404) ? kind(r, SoakKind::kUnknownModel).rejected.at(404) : 0,
            kind(r, SoakKind::kUnknownModel).sent);
  EXPECT_EQ(kind(r, SoakKind::kOversizedBody).rejected.count(413) ? kind(r, SoakKind::kOversizedBody).rejected.at(413) : 0,
            kind(r, SoakKind::kOversizedBody).sent);
  // Memory: sampled after the warm-up and at the end, within the bound.
  EXPECT_GT(r.rss_warmup, 0u);
  EXPECT_GT(r.rss_end, 0u);
  EXPECT_LE(r.rss_end, r.rss_warmup + r.rss_growth_bound) << report;
  EXPECT_EQ(s.stop(), 0) << "the server should stop cleanly after the soak";
}

// Without a vision tower every image is refused (400 images_not_supported): expected rejections.
TEST(Soak, ImagesToATextOnlyModelAreExpectedRejections) {
  ServerProcess s(soak_server_args(plain_model_dir()));
  const SoakResult r = server::run_soak(soak_options(s, 6, 16));
  const std::string report = server::soak_report(r);
  EXPECT_TRUE(r.passed()) << report;
  const server::SoakKindStats& images = kind(r, SoakKind::kImage);
  EXPECT_GT(images.sent, 0u) << report;
  EXPECT_EQ(images.ok, 0u) << report;
  EXPECT_EQ(images.rejected.count(400) ? images.rejected.at(400) : 0, images.sent) << report;
  EXPECT_EQ(s.stop(), 0);
}

// Sends `raw` on a new connection to 127.0.0.1:port and returns what comes back until the server
// closes it (or 10 s pass).
std::string raw_exchange(int port, const std::string& raw) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string got;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::send(fd, raw.data(), raw.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(raw.size())) {
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return got;
}

// The ledger (metrics.h) counts each API request once on arrival and once as completed, cancelled
// or rejected, whatever path its answer takes: handlers, 405 and 404 routes, OPTIONS, HEAD, a
// request httplib refuses before routing, a non-streamed client that hangs up (cancelled, not
// rejected 499), a stream.  /health and /metrics are not API requests.
TEST(Soak, TheLedgerCountsEveryAnswerOnce) {
  ServerProcess s({"--model", plain_model_dir(), "--served-model-name", "m", "--ctx", "8192"});
  httplib::Client cli = client(s);
  EXPECT_EQ(cli.Options("/v1/completions")->status, 204);
  EXPECT_EQ(cli.Get("/v1/completions")->status, 405);
  EXPECT_EQ(cli.Put("/tokenize", "{}", "application/json")->status, 405);
  EXPECT_EQ(cli.Post("/v1/nope", "{}", "application/json")->status, 404);
  EXPECT_EQ(cli.Get("/v1/nope")->status, 404);
  EXPECT_EQ(post(cli, "/tokenize", {{"prompt", "a"}}).status, 200);
  EXPECT_EQ(cli.Head("/v1/models")->status, 200);
  EXPECT_EQ(cli.Get("/health")->status, 200);
  // A header line over httplib's 8 KiB: it answers 400 before any handler (or the pre-routing
  // handler) runs.
  const std::string long_header = "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Long: " +
                                  std::string(10000, 'a') + "\r\n\r\n";
  EXPECT_EQ(raw_exchange(s.port(), long_header).rfind("HTTP/1.1 400", 0), 0u);
  {
    httplib::Client c = client(s);
    c.set_read_timeout(0, 500000);  // gives up after 0.5 s, while the request still generates
    const ojson b = {{"prompt", "Go on forever"}, {"max_tokens", 8000}, {"temperature", 0}, {"ignore_eos", true}};
    EXPECT_FALSE(c.Post("/v1/completions", b.dump(), "application/json"));
  }
  const Sse stream = post_sse(cli, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 3}, {"stream", true}});
  EXPECT_TRUE(stream.done) << stream.raw;
  std::string m;
  for (int i = 0; i < 400; ++i) {
    m = get_body(cli, "/metrics");
    if (metric(m, "k3_api_requests_cancelled_total") == 1.0 && metric(m, "k3_api_requests_completed_total") == 4.0 &&
        metric(m, "k3_requests_running") == 0.0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(metric(m, "k3_api_requests_total"), 10.0) << m;
  EXPECT_EQ(metric(m, "k3_api_requests_completed_total"), 4.0) << m;  // OPTIONS, tokenize, HEAD, the stream
  EXPECT_EQ(metric(m, "k3_api_requests_cancelled_total"), 1.0) << m;
  EXPECT_EQ(metric(m, "k3_requests_rejected_total{status=\"405\"}"), 2.0) << m;
  EXPECT_EQ(metric(m, "k3_requests_rejected_total{status=\"404\"}"), 2.0) << m;
  EXPECT_EQ(metric(m, "k3_requests_rejected_total{status=\"400\"}"), 1.0) << m;
  EXPECT_EQ(metric(m, "k3_requests_rejected_total{status=\"499\"}"), -1.0) << "a hang-up is no rejection\n" << m;
  EXPECT_GT(metric(m, "k3_process_resident_memory_bytes"), 1e6) << m;
}

TEST(Soak, DurationsAndBadOptions) {
  EXPECT_EQ(server::parse_soak_duration("90"), 90.0);
  EXPECT_EQ(server::parse_soak_duration("90s"), 90.0);
  EXPECT_EQ(server::parse_soak_duration("30m"), 1800.0);
  EXPECT_EQ(server::parse_soak_duration("1.5h"), 5400.0);
  for (const char* bad : {"", "m", "10x", "-5s", "1.2.3s", "5 m", "0s", "."})
    EXPECT_NE(error_of([&] { server::parse_soak_duration(bad); }).find("soak duration"), std::string::npos) << bad;
  SoakOptions o;
  o.url = "http://127.0.0.1:9";  // the options are checked before any connection
  o.concurrency = 0;
  EXPECT_NE(error_of([&] { server::run_soak(o); }).find("concurrency 0"), std::string::npos);
  o.concurrency = 4;
  o.warmup_fraction = 1;
  EXPECT_NE(error_of([&] { server::run_soak(o); }).find("warm-up"), std::string::npos);
  o.warmup_fraction = 0.1;
  o.max_tokens = 0;
  EXPECT_NE(error_of([&] { server::run_soak(o); }).find("max_tokens"), std::string::npos);
  o.max_tokens = 4;
  o.url = "http://127.0.0.1:9/v1";
  EXPECT_NE(error_of([&] { server::run_soak(o); }).find("path"), std::string::npos);
}

}  // namespace
}  // namespace k3::testing
