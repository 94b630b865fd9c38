// The server library's pieces that need no model: stop strings on streamed text, the request
// field checks, the error envelope, the Prometheus histogram, and finding a request's
// connection (on loopback sockets).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "server/api_error.h"
#include "server/generation_params.h"
#include "server/metrics.h"
#include "server/peer_connection.h"
#include "server/stop_matcher.h"

namespace k3::server {
namespace {

// Feeds `pieces` and returns everything emitted.
std::string run_stops(std::vector<std::string> stops, const std::vector<std::string>& pieces, bool* matched) {
  StopMatcher m(std::move(stops));
  std::string out;
  for (const std::string& p : pieces) out += m.push(p);
  out += m.flush();
  *matched = m.matched();
  return out;
}

TEST(StopMatcher, CutsAtTheEarliestStopAcrossPieces) {
  bool matched = false;
  EXPECT_EQ(run_stops({"END"}, {"abc E", "N", "D tail"}, &matched), "abc ");
  EXPECT_TRUE(matched);
  EXPECT_EQ(run_stops({"xyz", "b"}, {"aaxy", "zb"}, &matched), "aa");
  EXPECT_TRUE(matched);
  EXPECT_EQ(run_stops({"END"}, {"abc EN", "d"}, &matched), "abc ENd");
  EXPECT_FALSE(matched);
  EXPECT_EQ(run_stops({}, {"a", "b"}, &matched), "ab");
  EXPECT_EQ(run_stops({"\xc3\xa9t\xc3\xa9"}, {"l'\xc3\xa9", "t\xc3\xa9 x"}, &matched), "l'");  // "été"
  EXPECT_TRUE(matched);
  // A held partial match is released as soon as it cannot match any more.
  StopMatcher m({"stop"});
  EXPECT_EQ(m.push("go st"), "go ");
  EXPECT_EQ(m.push("ay"), "stay");
  EXPECT_EQ(m.push("s"), "");
  EXPECT_EQ(m.push("top!"), "");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.push("more"), "");
}

void expect_rejected(const ojson& body, Endpoint e, const std::string& field) {
  try {
    parse_generation_params(body, e);
    ADD_FAILURE() << "accepted " << body.dump();
  } catch (const ApiError& err) {
    EXPECT_EQ(err.status, 400);
    EXPECT_EQ(err.param, field) << err.what();
    EXPECT_NE(std::string(err.what()).find(field), std::string::npos) << err.what();
  }
}

TEST(GenerationParams, ReadsAndChecksFields) {
  const GenerationParams g = parse_generation_params(
      ojson::parse(R"({"max_tokens": 5, "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9,
                       "top_k": -1, "seed": 42, "stop": "\n", "stream": true,
                       "stream_options": {"include_usage": true}})"),
      Endpoint::kChat);
  EXPECT_EQ(g.max_tokens, 7);
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(g.sampling.top_p, 0.9f);
  EXPECT_EQ(g.sampling.top_k, 0);
  EXPECT_EQ(g.sampling.seed, 42u);
  EXPECT_EQ(g.stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(g.stream && g.include_usage);
  EXPECT_EQ(parse_generation_params(ojson::object(), Endpoint::kCompletion).max_tokens, 16);
  EXPECT_EQ(parse_generation_params(ojson::object(), Endpoint::kChat).max_tokens, 0);
  EXPECT_EQ(parse_generation_params({{"max_tokens", 3.0}}, Endpoint::kChat).max_tokens, 3);

  expect_rejected({{"max_tokens", 2.5}}, Endpoint::kChat, "max_tokens");
  expect_rejected({{"temperature", 3}}, Endpoint::kChat, "temperature");
  expect_rejected({{"top_p", 0}}, Endpoint::kChat, "top_p");
  expect_rejected({{"top_k", "a"}}, Endpoint::kChat, "top_k");
  expect_rejected({{"stop", ojson::array({""})}}, Endpoint::kChat, "stop");
  expect_rejected({{"stream", "yes"}}, Endpoint::kChat, "stream");
  expect_rejected({{"stream_options", {{"include_usage", true}}}}, Endpoint::kChat, "stream_options");
  expect_rejected({{"n", 0}}, Endpoint::kChat, "n");
  expect_rejected({{"n", 17}}, Endpoint::kChat, "n");
  EXPECT_EQ(parse_generation_params({{"n", 4}}, Endpoint::kChat).n, 4);
  expect_rejected({{"best_of", 3}}, Endpoint::kCompletion, "best_of");
  expect_rejected({{"logprobs", 21}}, Endpoint::kCompletion, "logprobs");
  expect_rejected({{"logprobs", true}}, Endpoint::kCompletion, "logprobs");
  expect_rejected({{"top_logprobs", 2}}, Endpoint::kChat, "top_logprobs");  // needs logprobs: true
  expect_rejected({{"logprobs", true}, {"top_logprobs", -1}}, Endpoint::kChat, "top_logprobs");
  EXPECT_EQ(parse_generation_params({{"logprobs", 3}}, Endpoint::kCompletion).top_logprobs, 3);
  EXPECT_EQ(parse_generation_params({{"logprobs", true}}, Endpoint::kChat).top_logprobs, 0);
  EXPECT_EQ(parse_generation_params({{"logprobs", true}, {"top_logprobs", 20}}, Endpoint::kChat).top_logprobs, 20);
  EXPECT_EQ(parse_generation_params({{"logprobs", false}}, Endpoint::kChat).top_logprobs, -1);
  expect_rejected({{"suffix", "x"}}, Endpoint::kCompletion, "suffix");
  expect_rejected({{"min_p", 1.5}}, Endpoint::kChat, "min_p");
  expect_rejected({{"presence_penalty", 2.5}}, Endpoint::kChat, "presence_penalty");
  expect_rejected({{"frequency_penalty", "1"}}, Endpoint::kChat, "frequency_penalty");
  expect_rejected({{"repetition_penalty", 0}}, Endpoint::kChat, "repetition_penalty");
  expect_rejected({{"logit_bias", {{"x", 1}}}}, Endpoint::kChat, "logit_bias");
  expect_rejected({{"logit_bias", {{"-3", 1}}}}, Endpoint::kChat, "logit_bias");
  expect_rejected({{"logit_bias", {{"5", 200}}}}, Endpoint::kChat, "logit_bias");
  expect_rejected({{"logit_bias", ojson::array({1})}}, Endpoint::kChat, "logit_bias");
  const GenerationParams pen = parse_generation_params(
      ojson::parse(R"({"logit_bias": {"5": -100, "7": 2.5}, "presence_penalty": 0.5, "frequency_penalty": -1,
                       "repetition_penalty": 1.2, "min_p": 0.05})"),
      Endpoint::kCompletion);
  EXPECT_EQ(pen.sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{5, -100.0f}, {7, 2.5f}}));
  EXPECT_FLOAT_EQ(pen.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(pen.sampling.frequency_penalty, -1.0f);
  EXPECT_FLOAT_EQ(pen.sampling.repetition_penalty, 1.2f);
  EXPECT_FLOAT_EQ(pen.sampling.min_p, 0.05f);
  expect_rejected({{"response_format", {{"type", "json_schema"}}}}, Endpoint::kChat, "response_format");
  try {
    parse_generation_params(ojson::parse(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x",
        "schema": {"type": "object", "properties": {"a": {"type": "string", "format": "date"}}}}}})"),
                            Endpoint::kChat);
    ADD_FAILURE() << "format is not supported";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "response_format");
    EXPECT_EQ(e.code, "unsupported_schema");
    EXPECT_NE(std::string(e.what()).find("'format'"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(parse_generation_params(ojson::parse(R"({"response_format": {"type": "json_schema", "json_schema":
      {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}}})"),
                                      Endpoint::kChat).json_schema);
  EXPECT_TRUE(parse_generation_params({{"response_format", {{"type", "json_object"}}}}, Endpoint::kChat).json_object);
  // Neutral values of unimplemented fields pass.
  EXPECT_NO_THROW(parse_generation_params(ojson::parse(R"({"n": 1, "presence_penalty": 0, "frequency_penalty": 0.0,
      "repetition_penalty": 1, "min_p": 0, "logprobs": false, "logit_bias": {}, "response_format": {"type": "text"}})"),
                                          Endpoint::kChat));
  try {
    check_model_field({{"model", "x"}}, "m");
    ADD_FAILURE();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code, "model_not_found");
  }
  EXPECT_NO_THROW(check_model_field({{"model", "m"}}, "m"));
  EXPECT_NO_THROW(check_model_field(ojson::object(), "m"));
}

TEST(GenerationParams, RefusesWhatUsedToSlipThrough) {
  // Integers past 2^63 - 1 wrapped (max_tokens "-1", top_k "no limit"); huge floats were an
  // undefined conversion.
  expect_rejected(ojson::parse(R"({"max_tokens": 18446744073709551615})"), Endpoint::kChat, "max_tokens");
  expect_rejected(ojson::parse(R"({"top_k": 18446744073709551615})"), Endpoint::kChat, "top_k");
  expect_rejected(ojson::parse(R"({"max_tokens": 1e300})"), Endpoint::kChat, "max_tokens");
  EXPECT_EQ(parse_generation_params(ojson::parse(R"({"max_tokens": 9223372036854775807})"), Endpoint::kChat).max_tokens,
            INT64_MAX);
  // logit_bias keys are decimal digits only (" +5" was token 5).
  for (const char* key : {" +5", "+5", "5 ", "0x5", "99999999999"})
    expect_rejected({{"logit_bias", {{key, 1}}}}, Endpoint::kChat, "logit_bias");
  EXPECT_EQ(parse_generation_params({{"logit_bias", {{"007", 1}}}}, Endpoint::kChat).sampling.logit_bias.at(0).first, 7);
  // Above 0 as doubles, 0 as the sampler's floats: refused later by the scheduler, as "max_tokens".
  expect_rejected({{"top_p", 1e-50}}, Endpoint::kChat, "top_p");
  expect_rejected({{"repetition_penalty", 1e-50}}, Endpoint::kCompletion, "repetition_penalty");
  EXPECT_GT(parse_generation_params({{"top_p", 1e-30}}, Endpoint::kChat).sampling.top_p, 0.0f);
  // stream_options.include_usage was reported as a top-level "include_usage".
  expect_rejected({{"stream", true}, {"stream_options", {{"include_usage", "yes"}}}}, Endpoint::kChat, "stream_options");
  // Chat-only fields on /v1/completions were ignored.
  for (const char* f : {"response_format", "tools", "tool_choice", "messages"})
    expect_rejected({{"prompt", "x"}, {f, ojson::object()}}, Endpoint::kCompletion, f);
}

TEST(ApiError, EnvelopeHasExactlyTheFourFields) {
  const ojson e = error_envelope(400, "bad", "temperature", "");
  EXPECT_EQ(e.dump(), R"({"error":{"message":"bad","type":"invalid_request_error","param":"temperature","code":null}})");
  EXPECT_EQ(error_envelope(401, "k")["error"]["type"], "authentication_error");
  EXPECT_EQ(error_envelope(429, "k")["error"]["type"], "rate_limit_error");
  EXPECT_EQ(error_envelope(500, "k")["error"]["type"], "server_error");
}

TEST(Metrics, HistogramIsCumulative) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(0.5);
  h.observe(7.0);
  std::string out;
  h.render(out, "x", "help");
  EXPECT_NE(out.find("x_bucket{le=\"0.1\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{le=\"1\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_sum 8.05\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_count 4\n"), std::string::npos) << out;
  ServerMetrics m;
  SchedulerStats s;
  s.running = 3;
  s.reserved_bytes = 50;
  m.count_finish("stop");
  const std::string text = m.render(&s, 200);
  EXPECT_NE(text.find("k3_requests_running 3\n"), std::string::npos);
  EXPECT_NE(text.find("k3_cache_usage_ratio 0.25\n"), std::string::npos);
  EXPECT_NE(text.find("k3_requests_finished_total{reason=\"stop\"} 1\n"), std::string::npos);
  // A long prompt's time to first token (minutes on a CPU) lands in a bucket of its own.
  m.ttft.observe(250.0);
  const std::string later = m.render(&s, 200);
  EXPECT_NE(later.find("k3_time_to_first_token_seconds_bucket{le=\"120\"} 0\n"), std::string::npos) << later;
  EXPECT_NE(later.find("k3_time_to_first_token_seconds_bucket{le=\"300\"} 1\n"), std::string::npos) << later;
}

int local_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  return ntohs(a.sin_port);
}

// The accepted socket is found by its two endpoints and counts as alive, with or without unread
// request bytes, until the client closes its end.
TEST(PeerConnection, FindsTheConnectionAndSeesTheHangUp) {
  const int lfd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(lfd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(lfd, 4), 0);
  a.sin_port = htons(static_cast<uint16_t>(local_port(lfd)));
  const int cfd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(cfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const int sfd = accept(lfd, nullptr, nullptr);
  ASSERT_GE(sfd, 0);
  const int server_port = local_port(lfd), client_port = local_port(cfd);

  const std::optional<PeerConnection> pc = PeerConnection::find("127.0.0.1", server_port, "127.0.0.1", client_port);
  ASSERT_TRUE(pc);
  EXPECT_EQ(pc->fd(), sfd);
  EXPECT_FALSE(PeerConnection::find("127.0.0.1", server_port, "127.0.0.1", client_port + 1));
  EXPECT_FALSE(PeerConnection::find("127.0.0.2", server_port, "127.0.0.1", client_port));
  EXPECT_FALSE(pc->hung_up());
  ASSERT_EQ(send(cfd, "GET", 3, 0), 3);
  EXPECT_FALSE(pc->hung_up()) << "unread bytes are not a hang-up";
  close(cfd);
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = pc->hung_up();
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone);
  close(sfd);
  close(lfd);
}

// Over IPv6 (tcp6 in the kernel's table): ::1, and an IPv4 client of a dual-stack listener, whose
// addresses cpp-httplib spells "::ffff:127.0.0.1".
TEST(PeerConnection, FindsIpv6AndIpv4MappedConnections) {
  const int lfd = socket(AF_INET6, SOCK_STREAM, 0);
  if (lfd < 0) GTEST_SKIP() << "no IPv6 sockets here";
  int off = 0;
  ASSERT_EQ(setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off), 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_any;
  if (bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(lfd, 4) != 0) {
    close(lfd);
    GTEST_SKIP() << "cannot listen on IPv6 here";
  }
  socklen_t len = sizeof a;
  ASSERT_EQ(getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int server_port = ntohs(a.sin6_port);
  const auto client_port_of = [](int fd) {
    sockaddr_storage c{};
    socklen_t n = sizeof c;
    EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&c), &n), 0);
    return c.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&c)->sin6_port)
                                   : ntohs(reinterpret_cast<sockaddr_in*>(&c)->sin_port);
  };

  sockaddr_in6 six{};
  six.sin6_family = AF_INET6;
  six.sin6_addr = in6addr_loopback;
  six.sin6_port = htons(static_cast<uint16_t>(server_port));
  const int c6 = socket(AF_INET6, SOCK_STREAM, 0);
  if (connect(c6, reinterpret_cast<sockaddr*>(&six), sizeof six) == 0) {
    const int s6 = accept(lfd, nullptr, nullptr);
    ASSERT_GE(s6, 0);
    const std::optional<PeerConnection> pc = PeerConnection::find("::1", server_port, "::1", client_port_of(c6));
    ASSERT_TRUE(pc);
    EXPECT_EQ(pc->fd(), s6);
    EXPECT_FALSE(PeerConnection::find("127.0.0.1", server_port, "127.0.0.1", client_port_of(c6)));
    close(s6);
  }
  close(c6);

  sockaddr_in four{};
  four.sin_family = AF_INET;
  four.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  four.sin_port = htons(static_cast<uint16_t>(server_port));
  const int c4 = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(c4, reinterpret_cast<sockaddr*>(&four), sizeof four), 0);
  const int s4 = accept(lfd, nullptr, nullptr);
  ASSERT_GE(s4, 0);
  const std::optional<PeerConnection> pc =
      PeerConnection::find("::ffff:127.0.0.1", server_port, "::ffff:127.0.0.1", client_port_of(c4));
  ASSERT_TRUE(pc);
  EXPECT_EQ(pc->fd(), s4);
  EXPECT_FALSE(PeerConnection::find("not an address", server_port, "::ffff:127.0.0.1", client_port_of(c4)));
  close(s4);
  close(c4);
  close(lfd);
}

}  // namespace
}  // namespace k3::server
