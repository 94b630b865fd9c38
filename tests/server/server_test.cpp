// `k3 serve` end to end: the built binary runs as a child process on a synthetic tiny model (with
// a synthetic vision tower) and is driven over raw HTTP: every error envelope and limit, the
// chat / completion / streaming shapes, stop strings, tokenize / detokenize (including the tool-call
// parser), metrics, 16 concurrent greedy streams against the same requests run one at a time, a
// client disconnect freeing its slot (streaming or not), the prompt-prefix cache across chat
// turns, the queue bound, the API key and images.  The node-based
// checks (official `openai` client, headless Chromium) are in server_js_test.cpp.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include <httplib.h>

#include "server_test_util.h"
#include "support/test_support.h"

namespace k3::testing {
namespace {

const ServerProcess& main_server() {
  static std::unique_ptr<ServerProcess> s = std::make_unique<ServerProcess>(std::vector<std::string>{
      "--model", vision_model_dir(), "--max-batch", "16", "--ctx", "1024", "--max-body-mb", "1", "--max-images", "2",
      "--max-image-mb", "0.25", "--max-image-pixels", "200000", "--served-model-name", "m"});
  return *s;
}

// The envelope exactly: {"error": {"message", "type", "param", "code"}} and nothing else.
void expect_envelope(const Reply& r, int status, const std::string& needle, const std::string& param = "") {
  SCOPED_TRACE(r.raw);
  EXPECT_EQ(r.status, status);
  ASSERT_TRUE(r.body.is_object() && r.body.size() == 1 && r.body.contains("error"));
  const ojson& e = r.body["error"];
  EXPECT_EQ(e.size(), 4u);
  ASSERT_TRUE(e.contains("message") && e["message"].is_string());
  EXPECT_NE(e["message"].get<std::string>().find(needle), std::string::npos) << e["message"];
  ASSERT_TRUE(e.contains("type") && e["type"].is_string());
  EXPECT_EQ(e["type"], status == 401 ? "authentication_error"
                       : status == 404 ? "not_found_error"
                       : status == 429 ? "rate_limit_error"
                       : status == 503 ? "service_unavailable_error"
                                       : "invalid_request_error");
  ASSERT_TRUE(e.contains("param") && e.contains("code"));
  if (!param.empty()) {
    EXPECT_EQ(e["param"], param);
  }
}

ojson chat_body(const std::string& text, int max_tokens = 8) {
  return {{"model", "m"},
          {"messages", ojson::array({{{"role", "user"}, {"content", text}}})},
          {"max_tokens", max_tokens},
          {"temperature", 0}};
}

TEST(Server, HealthModelsMetricsAndPage) {
  httplib::Client cli = client(main_server());
  auto h = cli.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  const Reply m = get(cli, "/v1/models");
  ASSERT_EQ(m.status, 200) << m.raw;
  EXPECT_EQ(m.body["object"], "list");
  const ojson& card = m.body["data"][0];
  EXPECT_EQ(card["id"], "m");
  EXPECT_EQ(card["object"], "model");
  EXPECT_EQ(card["owned_by"], "k3");
  EXPECT_TRUE(card["created"].is_number_integer());
  EXPECT_EQ(card["context_length"], 1024);
  EXPECT_EQ(get(cli, "/v1/models/m").status, 200);
  expect_envelope(get(cli, "/v1/models/other"), 404, "does not exist");

  auto page = cli.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("<title>k3 chat</title>"), std::string::npos);
  EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
  auto js = cli.Get("/app.js");
  ASSERT_TRUE(js);
  EXPECT_NE(js->body.find("/v1/chat/completions"), std::string::npos);
  EXPECT_NE(page->body.find(R"(<link rel="icon" href="/favicon.svg")"), std::string::npos);
  for (const char* path : {"/favicon.ico", "/favicon.svg"}) {  // browsers ask for /favicon.ico
    auto icon = cli.Get(path);
    ASSERT_TRUE(icon) << path;
    EXPECT_EQ(icon->status, 200) << path;
    EXPECT_EQ(icon->get_header_value("Content-Type"), "image/svg+xml") << path;
    EXPECT_EQ(icon->body.rfind("<svg ", 0), 0u) << path << ": " << icon->body;
  }

  ASSERT_EQ(post(cli, "/v1/chat/completions", chat_body("hello", 4)).status, 200);
  const std::string metrics = get_body(cli, "/metrics");
  for (const char* name : {"k3_requests_running 0", "k3_requests_waiting 0", "k3_prompt_tokens_total",
                           "k3_generation_tokens_total", "k3_time_to_first_token_seconds_bucket{le=",
                           "k3_time_per_output_token_seconds_count", "k3_cache_bytes", "k3_cache_usage_ratio",
                           "k3_requests_finished_total{reason=\"length\"}"})
    EXPECT_NE(metrics.find(name), std::string::npos) << name << "\n" << metrics;
  EXPECT_GE(metric(metrics, "k3_generation_tokens_total"), 4.0);
  EXPECT_GE(metric(metrics, "k3_time_to_first_token_seconds_count"), 1.0);
}

TEST(Server, ErrorEnvelopes) {
  httplib::Client cli = client(main_server());
  expect_envelope(post_raw(cli, "/v1/chat/completions", "{\"messages\": [", "application/json"), 400, "not valid JSON");
  expect_envelope(post_raw(cli, "/v1/chat/completions", "[1, 2]", "application/json"), 400, "JSON object");
  // A NUL byte ended the parse: the rest of the body (here a second object) was silently dropped.
  expect_envelope(post_raw(cli, "/v1/chat/completions",
                           std::string("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\0{\"x\": 1}", 58),
                           "application/json"),
                  400, "contains a NUL byte at offset 49");
  // 50k nested arrays (100 KB) as the tools: refused up front; they used to crash the server
  // (stack overflow in the recursive tool-declaration dump).
  expect_envelope(post_raw(cli, "/v1/chat/completions",
                           R"({"messages": [{"role": "user", "content": "hi"}], "tools": )" + std::string(50000, '[') +
                               std::string(50000, ']') + "}",
                           "application/json"),
                  400, "levels deep");
  ojson b = chat_body("hi");
  b["messages"] = "hello";
  expect_envelope(post(cli, "/v1/chat/completions", b), 400, "messages must be an array");
  b = chat_body("hi");
  b["temperature"] = "hot";
  expect_envelope(post(cli, "/v1/chat/completions", b), 400, "temperature must be a number", "temperature");
  b = chat_body("hi");
  b["max_tokens"] = 0;
  expect_envelope(post(cli, "/v1/chat/completions", b), 400, "max_tokens must be >= 1", "max_tokens");
  b = chat_body("hi");
  b["stop"] = ojson::array({1, 2});
  expect_envelope(post(cli, "/v1/chat/completions", b), 400, "stop must be a string or a list", "stop");
  b = chat_body("hi");
  b["messages"][0]["role"] = 7;
  expect_envelope(post(cli, "/v1/chat/completions", b), 400, "messages[0]");
  b = chat_body("hi");
  b["model"] = "gpt-4o";
  expect_envelope(post(cli, "/v1/chat/completions", b), 404, "'gpt-4o' does not exist", "model");
  // Longer than the 1024-token context.
  std::string long_text;
  for (int i = 0; i < 1200; ++i) long_text += "word" + std::to_string(i) + " ";
  const Reply too_long = post(cli, "/v1/chat/completions", chat_body(long_text));
  expect_envelope(too_long, 400, "context is 1024 tokens", "messages");
  EXPECT_EQ(too_long.body["error"]["code"], "context_length_exceeded");
  expect_envelope(post(cli, "/v1/completions", {{"prompt", long_text}}), 400, "context", "prompt");
  // Unsupported fields are refused, naming the field; neutral values pass.
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, ojson>>{{"best_of", 2}}) {
    b = chat_body("hi");
    b[field] = value;
    const Reply r = post(cli, "/v1/chat/completions", b);
    expect_envelope(r, 400, field, field);
    EXPECT_EQ(r.body["error"]["code"], "unsupported_field");
  }
  b = chat_body("hi", 2);
  b["n"] = 1;
  b["presence_penalty"] = 0;
  b["logit_bias"] = ojson::object();
  b["response_format"] = {{"type", "text"}};
  b["user"] = "someone";
  b["some_unknown_field"] = {1, 2};
  EXPECT_EQ(post(cli, "/v1/chat/completions", b).status, 200);
  expect_envelope(post(cli, "/v1/completions", {{"prompt", "a"}, {"echo", true}}), 400, "echo", "echo");
  expect_envelope(post(cli, "/v1/completions", {{"prompt", "a"}, {"logit_bias", {{"99999999", 1}}}}), 400,
                  "outside the vocabulary", "logit_bias");
  expect_envelope(post(cli, "/v1/completions", {{"prompt", ojson::array({"a", "b"})}}), 400, "one prompt", "prompt");
  expect_envelope(post(cli, "/v1/completions", {{"prompt", ojson::array({1, -4})}}), 400, "vocabulary", "prompt");
  expect_envelope(post(cli, "/v1/completions", {{"max_tokens", 3}}), 400, "prompt is required", "prompt");
  // Paths and methods.
  expect_envelope(get(cli, "/v1/nothing"), 404, "no route");
  expect_envelope(post(cli, "/v2/chat", ojson::object()), 404, "no route");
  const Reply m = get(cli, "/v1/chat/completions");
  expect_envelope(m, 405, "not allowed");
  expect_envelope(post(cli, "/health", ojson::object()), 405, "not allowed");
  // A body over --max-body-mb 1.
  expect_envelope(post_raw(cli, "/v1/chat/completions", std::string(2 << 20, ' '), "application/json"), 413,
                  "larger than the limit");
  // The server still works.
  EXPECT_EQ(post(cli, "/v1/chat/completions", chat_body("still fine", 2)).status, 200);
}

TEST(Server, ChatAndCompletionShapes) {
  httplib::Client cli = client(main_server());
  ojson b = chat_body("Tell me about the sea.", 12);
  b["chat_template_kwargs"] = {{"thinking", false}};
  const Reply r = post(cli, "/v1/chat/completions", b);
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["object"], "chat.completion");
  EXPECT_EQ(r.body["model"], "m");
  EXPECT_EQ(r.body["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  const ojson& choice = r.body["choices"][0];
  EXPECT_EQ(choice["index"], 0);
  EXPECT_EQ(choice["message"]["role"], "assistant");
  EXPECT_TRUE(choice["message"].contains("content"));
  EXPECT_TRUE(choice["message"]["reasoning_content"].is_null());  // thinking off
  const std::string reason = choice["finish_reason"];
  EXPECT_TRUE(reason == "stop" || reason == "length") << reason;
  const ojson& u = r.body["usage"];
  const Reply tok = post(cli, "/tokenize", b);
  ASSERT_EQ(tok.status, 200) << tok.raw;
  EXPECT_EQ(u["prompt_tokens"], tok.body["count"]);
  EXPECT_EQ(u["total_tokens"].get<int>(), u["prompt_tokens"].get<int>() + u["completion_tokens"].get<int>());
  EXPECT_LE(u["completion_tokens"].get<int>(), 12);
  EXPECT_EQ(u["completion_tokens_details"]["reasoning_tokens"], 0);

  // The same request streamed: role first, then deltas, the finish chunk, the usage chunk, [DONE].
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  const Sse s = post_sse(cli, "/v1/chat/completions", b);
  ASSERT_EQ(s.status, 200) << s.raw;
  ASSERT_TRUE(s.done) << s.raw;
  ASSERT_GE(s.events.size(), 3u);
  EXPECT_EQ(s.events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(s.events[0]["choices"][0]["delta"]["role"], "assistant");
  const ojson& fin = s.events[s.events.size() - 2];
  EXPECT_EQ(fin["choices"][0]["finish_reason"], reason);
  const ojson& usage = s.events.back();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], u["completion_tokens"]);
  EXPECT_EQ(usage["usage"]["prompt_tokens"], u["prompt_tokens"]);
  for (size_t i = 1; i + 2 < s.events.size(); ++i) {
    const ojson& d = s.events[i]["choices"][0]["delta"];
    EXPECT_FALSE(d.contains("reasoning_content")) << d;  // thinking off: content only
    EXPECT_TRUE(s.events[i]["choices"][0]["finish_reason"].is_null());
  }

  // Thinking on: the stream's text arrives as reasoning_content (the random model rarely closes
  // the think channel), and usage counts those tokens as reasoning.
  ojson t = chat_body("Think first.", 10);
  t["stream"] = true;
  t["stream_options"] = {{"include_usage", true}};
  t["reasoning_effort"] = "low";
  const Sse th = post_sse(cli, "/v1/chat/completions", t);
  ASSERT_EQ(th.status, 200) << th.raw;
  std::string reasoning;
  for (const ojson& e : th.events)
    if (!e["choices"].empty() && e["choices"][0]["delta"].contains("reasoning_content"))
      reasoning += e["choices"][0]["delta"]["reasoning_content"].get<std::string>();
  EXPECT_FALSE(reasoning.empty()) << th.raw;
  const ojson& tu = th.events.back()["usage"];
  EXPECT_GT(tu["completion_tokens_details"]["reasoning_tokens"].get<int>(), 0);
  EXPECT_LE(tu["completion_tokens_details"]["reasoning_tokens"], tu["completion_tokens"]);
  // Effort and thinking reach the renderer: the prompts differ.
  ojson t2 = t;
  t2["reasoning_effort"] = "max";
  EXPECT_NE(post(cli, "/tokenize", t)["tokens"], post(cli, "/tokenize", t2)["tokens"]);
  // "medium" (OpenAI's default) is taken as K3's "high"; the chat format's own field wins over it.
  ojson medium = t, high = t;
  medium["reasoning_effort"] = "medium";
  high["reasoning_effort"] = "high";
  EXPECT_EQ(post(cli, "/tokenize", medium)["tokens"], post(cli, "/tokenize", high)["tokens"]);
  ojson native = medium;
  native["chat_template_kwargs"] = {{"thinking_effort", "low"}};
  EXPECT_EQ(post(cli, "/tokenize", native)["tokens"], post(cli, "/tokenize", t)["tokens"]);
  ojson t3 = t;
  t3["chat_template_kwargs"] = {{"thinking", false}};
  EXPECT_NE(post(cli, "/tokenize", t)["tokens"], post(cli, "/tokenize", t3)["tokens"]);
  t["reasoning_effort"] = "extreme";
  expect_envelope(post(cli, "/v1/chat/completions", t), 400, "extreme");

  // Completions: the streamed text and token ids equal the non-streamed ones.
  ojson c = {{"prompt", "Once upon a time"}, {"max_tokens", 10}, {"temperature", 0}, {"return_token_ids", true}};
  const Reply cr = post(cli, "/v1/completions", c);
  ASSERT_EQ(cr.status, 200) << cr.raw;
  EXPECT_EQ(cr.body["object"], "text_completion");
  EXPECT_EQ(cr.body["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(cr.body["choices"][0]["token_ids"].size(), cr.body["usage"]["completion_tokens"].get<size_t>());
  c["stream"] = true;
  const Sse cs = post_sse(cli, "/v1/completions", c);
  ASSERT_TRUE(cs.done);
  std::string text;
  ojson ids = ojson::array();
  for (const ojson& e : cs.events)
    for (const ojson& ch : e["choices"]) {
      text += ch["text"].get<std::string>();
      if (ch.contains("token_ids"))
        for (const ojson& id : ch["token_ids"]) ids.push_back(id);
    }
  EXPECT_EQ(text, cr.body["choices"][0]["text"]);
  EXPECT_EQ(ids, cr.body["choices"][0]["token_ids"]);
  // Token-id prompts work the same as the text they encode.
  const ojson prompt_ids = post(cli, "/tokenize", {{"prompt", "Once upon a time"}})["tokens"];
  c = {{"prompt", prompt_ids}, {"max_tokens", 10}, {"temperature", 0}};
  EXPECT_EQ(post(cli, "/v1/completions", c)["choices"][0]["text"], cr.body["choices"][0]["text"]);
}

// A reply cut by max_tokens inside the think channel (biases keep the channel from closing) is
// reasoning, streamed or not, and usage counts every one of its tokens as reasoning in both.
TEST(Server, ReplyCutInsideThinkIsReasoningStreamedOrNot) {
  httplib::Client cli = client(main_server());
  ojson b = chat_body("Think about the sea.", 12);
  b["logit_bias"] = ojson::object();
  for (const char* special : {"<|open|>", "<|close|>", "<|end_of_msg|>", "[EOS]"}) {
    const ojson ids = post(cli, "/tokenize", {{"prompt", special}})["tokens"];
    ASSERT_EQ(ids.size(), 1u) << special;
    b["logit_bias"][std::to_string(ids[0].get<int>())] = -100;
  }
  const Reply whole = post(cli, "/v1/chat/completions", b);
  ASSERT_EQ(whole.status, 200) << whole.raw;
  const ojson& choice = whole.body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "length");
  const ojson& msg = choice["message"];
  ASSERT_TRUE(msg["reasoning_content"].is_string()) << msg;
  EXPECT_FALSE(msg["reasoning_content"].get<std::string>().empty()) << msg;
  EXPECT_TRUE(msg["content"].is_null()) << msg;
  EXPECT_FALSE(msg.contains("tool_calls")) << msg;
  const ojson& u = whole.body["usage"];
  EXPECT_EQ(u["completion_tokens"], 12);
  EXPECT_EQ(u["completion_tokens_details"]["reasoning_tokens"], u["completion_tokens"]);

  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  const Sse s = post_sse(cli, "/v1/chat/completions", b);
  ASSERT_TRUE(s.done) << s.raw;
  std::string reasoning, content;
  std::string reason;
  for (const ojson& e : s.events) {
    if (e["choices"].empty()) continue;
    const ojson& d = e["choices"][0]["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
    EXPECT_FALSE(d.contains("tool_calls")) << d;
    if (e["choices"][0]["finish_reason"].is_string()) reason = e["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(reasoning, msg["reasoning_content"]);
  EXPECT_EQ(content, "");  // only the role chunk's empty content
  EXPECT_EQ(reason, "length");
  const ojson& su = s.events.back()["usage"];
  EXPECT_EQ(su["prompt_tokens"], u["prompt_tokens"]);
  EXPECT_EQ(su["completion_tokens"], u["completion_tokens"]);
  EXPECT_EQ(su["completion_tokens_details"], u["completion_tokens_details"]);
}

// A chat's second turn starts from the first turn's last prefill-chunk boundary (usage reports
// those tokens as cached) and answers exactly what a server without the cache answers.
TEST(Server, PromptPrefixCacheAcrossTurns) {
  const std::vector<std::string> args = {"--model", plain_model_dir(), "--prefill-chunk", "16", "--ctx", "1024",
                                         "--served-model-name", "m"};
  std::vector<std::string> off = args;
  off.insert(off.end(), {"--prefix-cache-mb", "0"});
  ServerProcess cached(args), plain(off);
  httplib::Client a = client(cached), b = client(plain);
  ojson turn = chat_body("Describe, in a few sentences, how tides rise and fall along a long sandy coast.", 10);
  const Reply first = post(a, "/v1/chat/completions", turn);
  ASSERT_EQ(first.status, 200) << first.raw;
  EXPECT_EQ(first.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const int n1 = first.body["usage"]["prompt_tokens"];
  ASSERT_GT(n1, 16) << "the first prompt should pass a chunk boundary";
  turn["messages"].push_back(first.body["choices"][0]["message"]);
  turn["messages"].push_back({{"role", "user"}, {"content", "And why are there two a day?"}});
  turn["stream"] = true;
  turn["stream_options"] = {{"include_usage", true}};
  const Sse second = post_sse(a, "/v1/chat/completions", turn);
  ASSERT_TRUE(second.done) << second.raw;
  const ojson& usage = second.events.back()["usage"];
  EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], (n1 - 1) / 16 * 16) << usage;
  turn.erase("stream");
  turn.erase("stream_options");
  const Reply want = post(b, "/v1/chat/completions", turn);
  ASSERT_EQ(want.status, 200) << want.raw;
  EXPECT_EQ(want.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const Reply again = post(a, "/v1/chat/completions", turn);
  EXPECT_GT(again.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), n1 - 16);
  EXPECT_EQ(again.body["choices"][0]["message"], want.body["choices"][0]["message"]);
  // The streamed turn said the same, channel by channel.
  for (const char* field : {"reasoning_content", "content"}) {
    std::string streamed, whole;
    for (const ojson& e : second.events)
      if (!e["choices"].empty() && e["choices"][0]["delta"].contains(field))
        streamed += e["choices"][0]["delta"][field].get<std::string>();
    if (want.body["choices"][0]["message"][field].is_string())
      whole = want.body["choices"][0]["message"][field].get<std::string>();
    EXPECT_EQ(streamed, whole) << field;
  }
  const std::string metrics = get_body(a, "/metrics");
  EXPECT_EQ(metric(metrics, "k3_prefix_cache_hits_total"), 2.0) << metrics;
  EXPECT_EQ(metric(metrics, "k3_prompt_tokens_cached_total"),
            usage["prompt_tokens_details"]["cached_tokens"].get<double>() +
                again.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<double>());
  EXPECT_GT(metric(metrics, "k3_prefix_cache_bytes"), 0.0);
  EXPECT_EQ(metric(get_body(b, "/metrics"), "k3_prefix_cache_entries"), 0.0);

  // A request that a stop string ends (before the engine reports the request done) still
  // reports its cached prompt tokens, whole and streamed.
  const ojson seed = {{"prompt", "The tide tables for the harbour list high and low water for every day of the "
                                 "year, with the heights in metres above chart datum."},
                      {"max_tokens", 4},
                      {"temperature", 0}};
  const Reply plain_reply = post(a, "/v1/completions", seed);
  ASSERT_EQ(plain_reply.status, 200) << plain_reply.raw;
  const std::string text = plain_reply.body["choices"][0]["text"];
  ASSERT_FALSE(text.empty()) << plain_reply.raw;
  ojson stopped = seed;
  stopped["max_tokens"] = 64;
  size_t first_char = 1;  // one whole UTF-8 character
  while (first_char < text.size() && (static_cast<unsigned char>(text[first_char]) & 0xC0) == 0x80) ++first_char;
  stopped["stop"] = text.substr(0, first_char);
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "whole");
    ojson body = stopped;
    ojson u;
    if (stream) {
      body["stream"] = true;
      body["stream_options"] = {{"include_usage", true}};
      const Sse s = post_sse(a, "/v1/completions", body);
      ASSERT_TRUE(s.done) << s.raw;
      u = s.events.back()["usage"];
    } else {
      const Reply r = post(a, "/v1/completions", body);
      ASSERT_EQ(r.status, 200) << r.raw;
      EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop") << r.raw;
      EXPECT_EQ(r.body["choices"][0]["text"], "") << r.raw;
      u = r.body["usage"];
    }
    EXPECT_GE(u["prompt_tokens_details"]["cached_tokens"].get<int>(), 16) << u;
  }
}

// logit_bias and the penalties reach the sampler: a +100 bias makes greedy decoding repeat one
// token, and a frequency penalty then breaks the repetition.
TEST(Server, LogitBiasAndPenalties) {
  httplib::Client cli = client(main_server());
  ojson c = {{"prompt", "Once upon a time"}, {"max_tokens", 6}, {"temperature", 0}, {"return_token_ids", true},
             {"logit_bias", {{"300", 100}}}};
  const Reply biased = post(cli, "/v1/completions", c);
  ASSERT_EQ(biased.status, 200) << biased.raw;
  EXPECT_EQ(biased.body["choices"][0]["token_ids"], ojson::array({300, 300, 300, 300, 300, 300}));
  c["logit_bias"] = {{"300", 3}};
  c["frequency_penalty"] = 2;  // every repeat costs 2: the bias of 3 cannot keep one token in front
  const Reply penalised = post(cli, "/v1/completions", c);
  ASSERT_EQ(penalised.status, 200) << penalised.raw;
  const ojson& ids = penalised.body["choices"][0]["token_ids"];
  EXPECT_NE(ids, ojson::array({300, 300, 300, 300, 300, 300}));
  c.erase("frequency_penalty");
  c["logit_bias"] = ojson::object();
  c["presence_penalty"] = -2;
  c["repetition_penalty"] = 1.3;
  c["min_p"] = 0.2;
  c["temperature"] = 0.8;
  c["seed"] = 3;
  const Reply sampled = post(cli, "/v1/completions", c);
  ASSERT_EQ(sampled.status, 200) << sampled.raw;
  EXPECT_EQ(post(cli, "/v1/completions", c).body["choices"][0]["token_ids"], sampled.body["choices"][0]["token_ids"]);
}

// logprobs: one entry per generated token, the greedy token first among its alternatives, the
// same entries whether streamed or not; completions in the legacy shape.
TEST(Server, Logprobs) {
  httplib::Client cli = client(main_server());
  ojson b = chat_body("Name a colour.", 6);
  b["logprobs"] = true;
  b["top_logprobs"] = 3;
  b["ignore_eos"] = true;
  const Reply r = post(cli, "/v1/chat/completions", b);
  ASSERT_EQ(r.status, 200) << r.raw;
  const ojson& content = r.body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), r.body["usage"]["completion_tokens"].get<size_t>()) << r.raw;
  for (const ojson& e : content) {
    ASSERT_EQ(e["top_logprobs"].size(), 3u) << e;
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]) << "greedy picks the most likely token";
    EXPECT_DOUBLE_EQ(e["top_logprobs"][0]["logprob"].get<double>(), e["logprob"].get<double>());
    EXPECT_GE(e["top_logprobs"][0]["logprob"].get<double>(), e["top_logprobs"][1]["logprob"].get<double>());
    EXPECT_GE(e["top_logprobs"][1]["logprob"].get<double>(), e["top_logprobs"][2]["logprob"].get<double>());
    std::string bytes;
    for (const ojson& x : e["bytes"]) bytes += static_cast<char>(x.get<int>());
    EXPECT_FALSE(bytes.empty());
  }
  b["stream"] = true;
  const Sse s = post_sse(cli, "/v1/chat/completions", b);
  ASSERT_TRUE(s.done) << s.raw;
  ojson streamed = ojson::array();
  for (const ojson& ev : s.events)
    if (!ev["choices"].empty() && ev["choices"][0]["logprobs"].is_object())
      for (const ojson& e : ev["choices"][0]["logprobs"]["content"]) streamed.push_back(e);
  EXPECT_EQ(streamed, content);
  ojson nolp = chat_body("Name a colour.", 6);
  EXPECT_TRUE(post(cli, "/v1/chat/completions", nolp).body["choices"][0]["logprobs"].is_null());

  const ojson c = {{"prompt", "Once upon a time"}, {"max_tokens", 5}, {"temperature", 0}, {"logprobs", 2},
                   {"ignore_eos", true}, {"return_token_ids", true}};
  const Reply cr = post(cli, "/v1/completions", c);
  ASSERT_EQ(cr.status, 200) << cr.raw;
  const ojson& lp = cr.body["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 5u) << cr.raw;
  ASSERT_EQ(lp["token_logprobs"].size(), 5u);
  ASSERT_EQ(lp["top_logprobs"].size(), 5u);
  EXPECT_EQ(lp["text_offset"][0], 0);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_LE(lp["top_logprobs"][i].size(), 2u);
    EXPECT_DOUBLE_EQ(lp["top_logprobs"][i][lp["tokens"][i].get<std::string>()].get<double>(),
                     lp["token_logprobs"][i].get<double>());
  }
  // A bias changes the choice but not the (raw) logprobs the choice is reported with.
  ojson biased = c;
  const int forced = cr.body["choices"][0]["token_ids"][1].get<int>() == 300 ? 301 : 300;
  biased["logit_bias"] = {{std::to_string(forced), 100}};
  const Reply br = post(cli, "/v1/completions", biased);
  ASSERT_EQ(br.status, 200) << br.raw;
  EXPECT_EQ(br.body["choices"][0]["token_ids"][0], forced);
  EXPECT_LE(br.body["choices"][0]["logprobs"]["token_logprobs"][0].get<double>(), lp["token_logprobs"][0].get<double>());
}

// n choices: choice i is what one request with seed + i gives; streamed, each index has its own
// role, deltas and finish chunks, and one usage chunk sums the completions.
TEST(Server, SeveralChoices) {
  httplib::Client cli = client(main_server());
  ojson c = {{"prompt", "Once upon a time"}, {"max_tokens", 6}, {"temperature", 1.0}, {"seed", 11}, {"n", 3},
             {"ignore_eos", true}};
  const Reply r = post(cli, "/v1/completions", c);
  ASSERT_EQ(r.status, 200) << r.raw;
  ASSERT_EQ(r.body["choices"].size(), 3u);
  c.erase("n");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.body["choices"][i]["index"], i);
    c["seed"] = 11 + i;
    EXPECT_EQ(r.body["choices"][i]["text"], post(cli, "/v1/completions", c).body["choices"][0]["text"]) << i;
  }
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 18);
  EXPECT_EQ(r.body["usage"]["total_tokens"], 18 + r.body["usage"]["prompt_tokens"].get<int>());

  ojson b = chat_body("Tell me a story.", 5);
  b["n"] = 2;
  b["temperature"] = 0.9;
  b["seed"] = 4;
  b["ignore_eos"] = true;
  const Reply whole = post(cli, "/v1/chat/completions", b);
  ASSERT_EQ(whole.status, 200) << whole.raw;
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  const Sse s = post_sse(cli, "/v1/chat/completions", b);
  ASSERT_TRUE(s.done) << s.raw;
  std::string text[2];
  int roles[2] = {0, 0}, finishes[2] = {0, 0}, usages = 0;
  for (const ojson& e : s.events) {
    EXPECT_EQ(e["id"], s.events[0]["id"]) << "one response id for all choices";
    if (e["choices"].empty()) {
      ++usages;
      EXPECT_EQ(e["usage"]["completion_tokens"], whole.body["usage"]["completion_tokens"]);
      continue;
    }
    const int i = e["choices"][0]["index"];
    ASSERT_TRUE(i == 0 || i == 1) << e;
    const ojson& d = e["choices"][0]["delta"];
    if (d.contains("role")) ++roles[i];
    for (const char* f : {"reasoning_content", "content"})
      if (d.contains(f)) text[i] += d[f].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) ++finishes[i];
  }
  EXPECT_EQ(usages, 1);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(roles[i], 1);
    EXPECT_EQ(finishes[i], 1);
    std::string want;
    for (const char* f : {"reasoning_content", "content"})
      if (whole.body["choices"][i]["message"][f].is_string()) want += whole.body["choices"][i]["message"][f].get<std::string>();
    EXPECT_EQ(text[i], want) << i;
  }
  expect_envelope(post(cli, "/v1/completions", {{"prompt", "a"}, {"n", 0}}), 400, "n must be", "n");
  expect_envelope(post(cli, "/v1/completions", {{"prompt", "a"}, {"n", 17}}), 400, "n must be", "n");
}

// response_format json_object / json_schema: the content is one JSON object (that satisfies the
// schema) and the message ends properly
// (equal biases on '}' and '"' let the random model's object close within a few tokens).
TEST(Server, JsonObjectResponses) {
  httplib::Client cli = client(main_server());
  const int brace = post(cli, "/tokenize", {{"prompt", "}"}})["tokens"][0];
  const int quote = post(cli, "/tokenize", {{"prompt", "\""}})["tokens"][0];
  for (int seed = 0; seed < 4; ++seed) {
    ojson b = chat_body("Reply in JSON.", 200);
    b["response_format"] = {{"type", "json_object"}};
    b["chat_template_kwargs"] = {{"thinking", false}};
    b["temperature"] = 0.7;
    b["seed"] = seed;
    b["logit_bias"] = {{std::to_string(brace), 10}, {std::to_string(quote), 10}};
    const Reply r = post(cli, "/v1/chat/completions", b);
    ASSERT_EQ(r.status, 200) << r.raw;
    const ojson& m = r.body["choices"][0]["message"];
    ASSERT_TRUE(m["content"].is_string()) << r.raw;
    EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop") << r.raw;
    const std::string content = m["content"];
    ASSERT_TRUE(ojson::accept(content)) << content;
    EXPECT_TRUE(ojson::parse(content).is_object()) << content;
  }
  // json_schema: the object has exactly the required boolean (no bias needed: the schema forces
  // the key, the value is true or false, and then only '}' fits).
  const ojson schema = {{"type", "object"},
                        {"properties", {{"ok", {{"type", "boolean"}}}, {"n", {{"type", "integer"}}}}},
                        {"required", {"ok"}},
                        {"additionalProperties", false}};
  for (int seed = 0; seed < 3; ++seed) {
    ojson b = chat_body("Reply in JSON.", 300);
    b["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "r"}, {"schema", schema}, {"strict", true}}}};
    b["chat_template_kwargs"] = {{"thinking", false}};
    b["seed"] = seed;
    b["logit_bias"] = {{std::to_string(brace), 8}};
    const Reply r = post(cli, "/v1/chat/completions", b);
    ASSERT_EQ(r.status, 200) << r.raw;
    const ojson& m = r.body["choices"][0]["message"];
    ASSERT_TRUE(m["content"].is_string()) << r.raw;
    EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop") << r.raw;
    const ojson v = ojson::parse(m["content"].get<std::string>());
    ASSERT_TRUE(v.is_object() && v.contains("ok") && v["ok"].is_boolean()) << v;
    EXPECT_TRUE(v.size() == 1 || (v.size() == 2 && v["n"].is_number_integer())) << v;
  }
  ojson bad = chat_body("x");
  bad["response_format"] = {{"type", "yaml"}};
  expect_envelope(post(cli, "/v1/chat/completions", bad), 400, "response_format type", "response_format");
  bad["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "r"}, {"schema", {{"type", "object"},
      {"properties", {{"a", {{"type", "string"}, {"pattern", "^x"}}}}}}}}}};
  const Reply unsupported = post(cli, "/v1/chat/completions", bad);
  expect_envelope(unsupported, 400, "'pattern'", "response_format");
  EXPECT_EQ(unsupported.body["error"]["code"], "unsupported_schema");
}

// tool_choice required / named: whatever the model prefers, the message goes into the tools
// channel with a call of a declared tool (the random model's raw output, read back from the
// logprobs' tokens, carries the forced frame); a named function that is not a tool is a 400.
TEST(Server, ForcedToolCalls) {
  httplib::Client cli = client(main_server());
  const int close = post(cli, "/tokenize", {{"prompt", "<|close|>"}})["tokens"][0];
  const ojson tools = ojson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "web_search", "parameters": {"type": "object"}}}])");
  for (const ojson& choice : {ojson("required"), ojson::parse(R"({"type": "function", "function": {"name": "web_search"}})")}) {
    ojson b = chat_body("What is the weather?", 150);
    b["tools"] = tools;
    b["tool_choice"] = choice;
    b["logprobs"] = true;
    b["logit_bias"] = {{std::to_string(close), 20}};  // leave reasoning and response at once
    const Reply r = post(cli, "/v1/chat/completions", b);
    ASSERT_EQ(r.status, 200) << r.raw;
    std::string raw;
    for (const ojson& e : r.body["choices"][0]["logprobs"]["content"]) raw += e["token"].get<std::string>();
    const std::string head = "<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"";
    const size_t at = raw.find(head);
    ASSERT_NE(at, std::string::npos) << raw;
    const std::string rest = raw.substr(at + head.size());
    if (choice.is_string())
      EXPECT_TRUE(rest.rfind("get_weather\" index=\"1\"<|sep|>", 0) == 0 || rest.rfind("web_search\" index=\"1\"<|sep|>", 0) == 0)
          << raw;
    else
      EXPECT_EQ(rest.rfind("web_search\" index=\"1\"<|sep|>", 0), 0u) << raw;
    const size_t end = raw.find("<|end_of_msg|>");
    if (end != std::string::npos) {
      EXPECT_LT(raw.find("<|close|>call<|sep|>"), end) << "no end before the call closes: " << raw;
    }
  }
  ojson bad = chat_body("x");
  bad["tools"] = tools;
  bad["tool_choice"] = ojson::parse(R"({"type": "function", "function": {"name": "nope"}})");
  expect_envelope(post(cli, "/v1/chat/completions", bad), 400, "'nope'", "tool_choice");
  bad["tool_choice"] = "required";
  bad["response_format"] = {{"type", "json_object"}};
  expect_envelope(post(cli, "/v1/chat/completions", bad), 400, "cannot be combined", "response_format");
}

// Without any help from the model (no logit bias: the random model never closes its reasoning on
// its own), tool_choice "required" still ends in a call within max_tokens: the reasoning gets half
// the budget, then the constraint closes it and writes the shortest call.  The response channel
// holds nothing.  A budget too small for a call (the tiny model's small vocabulary spells the
// frame in ~75 tokens) ends cut, with no markup in the content.  The same holds for
// response_format: the JSON object comes within the budget.
TEST(Server, RequiredToolCallComesWithinMaxTokens) {
  httplib::Client cli = client(main_server());
  const ojson params = ojson::parse(R"({"type": "object", "properties": {"city": {"type": "string"}},
    "required": ["city"]})");
  for (int max_tokens : {100, 200, 400}) {
    ojson b = chat_body("What is the weather in Paris?", max_tokens);
    b["tools"] = ojson::array({{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", params}}}}});
    b["tool_choice"] = "required";
    b["chat_template_kwargs"] = {{"thinking", true}};
    const Reply r = post(cli, "/v1/chat/completions", b);
    ASSERT_EQ(r.status, 200) << r.raw;
    const ojson& choice = r.body["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << max_tokens << " " << r.raw;
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.raw;
    EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_TRUE(ojson::parse(choice["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>())["city"]
                    .is_string());
    EXPECT_TRUE(choice["message"]["content"].is_null() || choice["message"]["content"] == "") << r.raw;
    EXPECT_LE(r.body["usage"]["completion_tokens"].get<int>(), max_tokens);
  }
  for (int max_tokens : {1, 8, 40, 60}) {
    ojson b = chat_body("What is the weather in Paris?", max_tokens);
    b["tools"] = ojson::array({{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", params}}}}});
    b["tool_choice"] = "required";
    const Reply r = post(cli, "/v1/chat/completions", b);
    ASSERT_EQ(r.status, 200) << r.raw;
    const ojson& m = r.body["choices"][0]["message"];
    if (r.body["choices"][0]["finish_reason"] == "length") {
      const std::string content = m["content"].is_string() ? m["content"].get<std::string>() : "";
      EXPECT_EQ(content.find("<|"), std::string::npos) << r.raw;
      EXPECT_EQ(content.find("call tool="), std::string::npos) << r.raw;
    }
  }
  ojson j = chat_body("Answer in JSON.", 80);
  j["response_format"] = {{"type", "json_object"}};
  j["chat_template_kwargs"] = {{"thinking", true}};
  const Reply jr = post(cli, "/v1/chat/completions", j);
  ASSERT_EQ(jr.status, 200) << jr.raw;
  EXPECT_EQ(jr.body["choices"][0]["finish_reason"], "stop") << jr.raw;
  EXPECT_TRUE(ojson::parse(jr.body["choices"][0]["message"]["content"].get<std::string>()).is_object()) << jr.raw;
}

// A forced call's arguments satisfy the tool's parameters (the random model only gets a bias
// towards <|close|>, which ends every free run at once); a "strict" tool whose schema is outside
// the supported subset is a 400, a non-strict one keeps free arguments.
TEST(Server, ForcedToolCallArgumentsFollowTheSchema) {
  httplib::Client cli = client(main_server());
  const int close = post(cli, "/tokenize", {{"prompt", "<|close|>"}})["tokens"][0];
  const ojson params = ojson::parse(R"({"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"enum": ["celsius", "fahrenheit"]},
      "when": {"type": "object", "properties": {"day": {"type": "integer"}}, "required": ["day"]}},
    "required": ["city", "days", "unit", "when"], "additionalProperties": false})");
  for (int seed = 0; seed < 3; ++seed) {
    ojson b = chat_body("What is the weather?", 300);
    b["tools"] = ojson::array({{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", params}}}}});
    b["tool_choice"] = "required";
    b["parallel_tool_calls"] = false;
    b["seed"] = seed;
    b["temperature"] = 0.8;
    b["logit_bias"] = {{std::to_string(close), 12}};
    const Reply r = post(cli, "/v1/chat/completions", b);
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["choices"][0]["finish_reason"], "tool_calls") << r.raw;
    const ojson& calls = r.body["choices"][0]["message"]["tool_calls"];
    ASSERT_EQ(calls.size(), 1u) << r.raw;
    const ojson args = ojson::parse(calls[0]["function"]["arguments"].get<std::string>());
    EXPECT_TRUE(args["city"].is_string()) << args;
    EXPECT_TRUE(args["days"].is_number_integer()) << args;
    EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit") << args;
    EXPECT_TRUE(args["when"].is_object() && args["when"]["day"].is_number_integer()) << args;
    EXPECT_EQ(args.size(), 4u) << args;
  }
  ojson odd = ojson::parse(R"({"type": "object", "properties": {"q": {"type": "string", "pattern": "^a"}}})");
  ojson b = chat_body("x", 40);
  b["tools"] = ojson::array({{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", odd}}}}});
  b["tool_choice"] = "required";
  EXPECT_EQ(post(cli, "/v1/chat/completions", b).status, 200);  // free arguments
  b["tools"][0]["function"]["strict"] = true;
  const Reply strict = post(cli, "/v1/chat/completions", b);
  expect_envelope(strict, 400, "'pattern'", "tools");
  EXPECT_EQ(strict.body["error"]["code"], "unsupported_schema");
}

TEST(Server, StopStringsAndSeeds) {
  httplib::Client cli = client(main_server());
  ojson c = {{"prompt", "The quick brown fox"}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true},
             {"skip_special_tokens", true}};
  const Reply full = post(cli, "/v1/completions", c);
  ASSERT_EQ(full.status, 200) << full.raw;
  const std::string text = full.body["choices"][0]["text"];
  EXPECT_EQ(full.body["choices"][0]["finish_reason"], "length");
  ASSERT_GE(text.size(), 8u) << text;
  // A stop string taken from the middle of the output cuts it there (non-stream and stream).
  size_t at = text.size() / 2;
  while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
  const std::string stop = text.substr(at, std::min<size_t>(3, text.size() - at));
  const std::string want = text.substr(0, text.find(stop));
  c["stop"] = ojson::array({"never-appears-xyz", stop});
  const Reply cut = post(cli, "/v1/completions", c);
  EXPECT_EQ(cut.body["choices"][0]["text"], want);
  EXPECT_EQ(cut.body["choices"][0]["finish_reason"], "stop");
  c["stream"] = true;
  const Sse s = post_sse(cli, "/v1/completions", c);
  std::string streamed;
  for (const ojson& e : s.events) streamed += e["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, want);
  EXPECT_EQ(s.events.back()["choices"][0]["finish_reason"], "stop");
  // Seeded sampling repeats; another seed (almost surely) differs.
  ojson r = {{"prompt", "Random"}, {"max_tokens", 16}, {"temperature", 1.0}, {"top_k", 50}, {"seed", 7},
             {"ignore_eos", true}, {"return_token_ids", true}};
  const ojson a = post(cli, "/v1/completions", r)["choices"][0]["token_ids"];
  EXPECT_EQ(post(cli, "/v1/completions", r)["choices"][0]["token_ids"], a);
  r["seed"] = 8;
  EXPECT_NE(post(cli, "/v1/completions", r)["choices"][0]["token_ids"], a);
}

TEST(Server, TokenizeDetokenizeAndToolCalls) {
  httplib::Client cli = client(main_server());
  const Reply t = post(cli, "/tokenize", {{"prompt", "Hello, world!"}});
  ASSERT_EQ(t.status, 200) << t.raw;
  EXPECT_EQ(t.body["count"], t.body["tokens"].size());
  EXPECT_EQ(t.body["max_model_len"], 1024);
  const Reply d = post(cli, "/detokenize", {{"tokens", t.body["tokens"]}});
  EXPECT_EQ(d.body["prompt"], "Hello, world!");
  expect_envelope(post(cli, "/detokenize", {{"tokens", "abc"}}), 400, "tokens", "tokens");
  expect_envelope(post(cli, "/detokenize", {{"tokens", {1, 999999999}}}), 400, "vocabulary", "tokens");
  expect_envelope(post(cli, "/tokenize", {{"text", "x"}}), 400, "prompt");

  // An assistant reply in the K3 format, read back through the output parser.
  const std::string reply =
      "Let me check.<|close|>think<|sep|><|open|>response<|sep|>One moment.<|close|>response<|sep|>"
      "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"0\"<|sep|>"
      "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|>"
      "<|open|>argument key=\"days\" type=\"integer\"<|sep|>3<|close|>argument<|sep|>"
      "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>";
  const ojson ids = post(cli, "/tokenize", {{"prompt", reply}})["tokens"];
  const Reply parsed = post(cli, "/detokenize", {{"tokens", ids}, {"chat_format", true}});
  ASSERT_EQ(parsed.status, 200) << parsed.raw;
  EXPECT_EQ(parsed.body["prompt"], reply);
  const ojson& msg = parsed.body["message"];
  EXPECT_EQ(msg["reasoning_content"], "Let me check.");
  EXPECT_EQ(msg["content"], "One moment.");
  ASSERT_EQ(msg["tool_calls"].size(), 1u) << msg;
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Paris\", \"days\": 3}");

  // The round trip: that assistant message and the tool's result go into the next request.
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather forecast", "parameters": {"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}])");
  ojson next = {{"model", "m"},
                {"tools", tools},
                {"max_tokens", 6},
                {"temperature", 0},
                {"messages", ojson::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})}};
  ojson assistant = msg;
  next["messages"].push_back(assistant);
  next["messages"].push_back({{"role", "tool"}, {"tool_call_id", msg["tool_calls"][0]["id"]}, {"content", "sunny, 21C"}});
  const Reply round = post(cli, "/v1/chat/completions", next);
  ASSERT_EQ(round.status, 200) << round.raw;
  const std::string rendered = post(cli, "/detokenize", {{"tokens", post(cli, "/tokenize", next)["tokens"]}})["prompt"];
  for (const char* needle : {"get_weather", "call tool=\"get_weather\"", "Paris", "sunny, 21C", "role=\"tool\""})
    EXPECT_NE(rendered.find(needle), std::string::npos) << needle << "\n" << rendered;
  EXPECT_EQ(round.body["usage"]["prompt_tokens"], post(cli, "/tokenize", next)["count"]);
  next["tool_choice"] = "sometimes";
  expect_envelope(post(cli, "/v1/chat/completions", next), 400, "tool_choice");
}

TEST(Server, ConcurrentGreedyStreamsMatchOneAtATime) {
  httplib::Client cli = client(main_server());
  constexpr int kN = 16;
  std::vector<ojson> reqs;
  for (int i = 0; i < kN; ++i) {
    ojson prompt = ojson::array();
    for (int j = 0; j < 2 + (5 * i) % 23; ++j) prompt.push_back(300 + (i * 131 + j * 17) % 700);
    reqs.push_back({{"prompt", prompt}, {"max_tokens", 5 + i % 4}, {"temperature", 0}, {"stream", true},
                    {"ignore_eos", true}, {"return_token_ids", true}});
  }
  const auto token_ids = [](const Sse& s) {
    std::vector<int> ids;
    for (const ojson& e : s.events)
      for (const ojson& ch : e["choices"])
        if (ch.contains("token_ids"))
          for (const ojson& id : ch["token_ids"]) ids.push_back(id.get<int>());
    return ids;
  };
  std::vector<std::vector<int>> alone(kN), together(kN);
  for (int i = 0; i < kN; ++i) {
    const Sse s = post_sse(cli, "/v1/completions", reqs[i]);
    ASSERT_TRUE(s.done) << s.raw;
    alone[i] = token_ids(s);
    EXPECT_EQ(alone[i].size(), reqs[i]["max_tokens"].get<size_t>());
  }
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  std::vector<std::string> replies(kN);  // status and body head, for a failure message
  for (int i = 0; i < kN; ++i)
    threads.emplace_back([&, i] {
      httplib::Client c = client(main_server());
      const Sse s = post_sse(c, "/v1/completions", reqs[i]);
      if (s.done) ++ok;
      together[i] = token_ids(s);
      replies[i] = "status " + std::to_string(s.status) + ": " + s.raw.substr(0, 300);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kN);
  for (int i = 0; i < kN; ++i) EXPECT_EQ(together[i], alone[i]) << "request " << i << ", " << replies[i];
}

TEST(Server, DisconnectFreesTheSlot) {
  httplib::Client cli = client(main_server());
  const double cancelled_before = metric(get_body(cli, "/metrics"), "k3_requests_finished_total{reason=\"cancelled\"}");
  std::atomic<int> chunks{0};
  httplib::Client c = client(main_server());
  ojson b = {{"prompt", "Go on forever"}, {"max_tokens", 200}, {"temperature", 0}, {"stream", true},
             {"ignore_eos", true}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = b.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };  // then hang up
  auto r = c.send(req);
  c.stop();
  EXPECT_GE(chunks.load(), 3);
  // The slot is freed: running back to 0, and the request counted as cancelled before its 200 tokens.
  std::string metrics;
  for (int i = 0; i < 400; ++i) {
    metrics = get_body(cli, "/metrics");
    if (metric(metrics, "k3_requests_running") == 0.0 &&
        metric(metrics, "k3_requests_finished_total{reason=\"cancelled\"}") > cancelled_before)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(metric(metrics, "k3_requests_running"), 0.0) << metrics;
  EXPECT_GT(metric(metrics, "k3_requests_finished_total{reason=\"cancelled\"}"), cancelled_before) << metrics;
  EXPECT_EQ(metric(metrics, "k3_cache_bytes"), 0.0) << metrics;
}

// A non-streaming client that gives up is noticed while its request still generates: the
// request is cancelled and its slot freed, not run to the end for nobody.
TEST(Server, NonStreamingHangUpCancels) {
  ServerProcess s({"--model", plain_model_dir(), "--served-model-name", "m", "--ctx", "8192"});
  httplib::Client cli = client(s);
  {
    httplib::Client c = client(s);
    c.set_read_timeout(0, 500000);  // gives up after 0.5 s, then closes the connection
    const ojson b = {{"prompt", "Go on forever"}, {"max_tokens", 8000}, {"temperature", 0}, {"ignore_eos", true}};
    EXPECT_FALSE(c.Post("/v1/completions", b.dump(), "application/json"));
  }
  std::string metrics;
  for (int i = 0; i < 400; ++i) {
    metrics = get_body(cli, "/metrics");
    if (metric(metrics, "k3_requests_finished_total{reason=\"cancelled\"}") == 1.0 &&
        metric(metrics, "k3_requests_running") == 0.0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(metric(metrics, "k3_requests_finished_total{reason=\"cancelled\"}"), 1.0) << metrics;
  EXPECT_EQ(metric(metrics, "k3_requests_finished_total{reason=\"length\"}"), 0.0) << metrics;
  EXPECT_EQ(metric(metrics, "k3_requests_running"), 0.0) << metrics;
  EXPECT_LT(metric(metrics, "k3_generation_tokens_total"), 8000.0);
}

TEST(Server, FullQueueAnswers429) {
  ServerProcess s({"--model", plain_model_dir(), "--served-model-name", "m", "--max-batch", "1", "--max-queue", "1"});
  httplib::Client cli = client(s);
  // A holds the only slot, B waits; C finds the queue full.
  std::atomic<bool> release{false};
  std::atomic<int> a_chunks{0};
  const auto hold = [&](std::atomic<int>* chunks) {
    httplib::Client c = client(s);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = ojson({{"prompt", "hold"}, {"max_tokens", 3000}, {"temperature", 0}, {"stream", true},
                      {"ignore_eos", true}})
                   .dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&, chunks](const char*, size_t, uint64_t, uint64_t) {
      if (chunks) ++*chunks;
      return !release.load();
    };
    c.send(req);
  };
  std::thread a(hold, &a_chunks);
  while (a_chunks.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // Two choices with room for one: the whole request is refused, its first choice taken back
  // (not left waiting, not counted as a cancelled request).
  const Reply two = post(cli, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}, {"n", 2}});
  expect_envelope(two, 429, "busy");
  std::string m = get_body(cli, "/metrics");
  for (int i = 0; i < 400 && metric(m, "k3_requests_waiting") > 0.0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    m = get_body(cli, "/metrics");
  }
  EXPECT_EQ(metric(m, "k3_requests_waiting"), 0.0) << m;
  EXPECT_EQ(metric(m, "k3_requests_finished_total{reason=\"cancelled\"}"), 0.0) << m;
  EXPECT_EQ(metric(m, "k3_requests_rejected_total{status=\"429\"}"), 1.0) << m;
  std::thread b(hold, nullptr);
  for (int i = 0; i < 400 && metric(get_body(cli, "/metrics"), "k3_requests_waiting") < 1.0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  ASSERT_EQ(metric(get_body(cli, "/metrics"), "k3_requests_waiting"), 1.0);
  const Reply c = post(cli, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}});
  expect_envelope(c, 429, "busy");
  EXPECT_EQ(c.body["error"]["code"], "queue_full");
  release = true;
  a.join();
  b.join();
  // Both freed: a new request runs.
  for (int i = 0; i < 400 && metric(get_body(cli, "/metrics"), "k3_requests_running") > 0.0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  EXPECT_EQ(post(cli, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}}).status, 200);
}

TEST(Server, ApiKey) {
  ServerProcess s({"--model", plain_model_dir(), "--served-model-name", "m", "--api-key", "sesame"});
  httplib::Client cli = client(s);
  expect_envelope(post(cli, "/v1/chat/completions", chat_body("hi", 2)), 401, "missing API key");
  httplib::Headers wrong = {{"Authorization", "Bearer nope"}};
  expect_envelope(post(cli, "/v1/chat/completions", chat_body("hi", 2), wrong), 401, "invalid API key");
  expect_envelope(get(cli, "/v1/models", wrong), 401, "invalid API key");
  expect_envelope(post(cli, "/tokenize", {{"prompt", "a"}}), 401, "API key");
  httplib::Headers right = {{"Authorization", "Bearer sesame"}};
  EXPECT_EQ(post(cli, "/v1/chat/completions", chat_body("hi", 2), right).status, 200);
  EXPECT_EQ(cli.Get("/health")->status, 200);  // health, metrics and the page stay open
  EXPECT_EQ(cli.Get("/")->status, 200);
  EXPECT_EQ(cli.Get("/favicon.ico")->status, 200);
  EXPECT_NE(get_body(cli, "/metrics").find("k3_requests_rejected_total{status=\"401\"} 4"), std::string::npos);
  EXPECT_EQ(s.stop(), 0) << "SIGTERM should end the server cleanly (exit 0; no sanitizer report)";
}

// A model that cannot load fails before the socket is bound (the CLI's error, no "listening"),
// and a port in use is refused up front.
TEST(Server, StartupFailuresAreCleanErrors) {
  TempDir empty;
  const CommandResult r = run_k3("serve --port 0 --model " + empty.path());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  // Checked from the headers before the socket is bound: nothing was said to be listening.
  EXPECT_EQ(r.out.find("listening"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("k3: error: cannot serve " + empty.path()), std::string::npos) << r.err;
  const CommandResult busy = run_k3("serve --port " + std::to_string(main_server().port()) + " --model " +
                                    plain_model_dir());
  EXPECT_EQ(busy.exit_code, 1);
  EXPECT_NE(busy.err.find("cannot listen on 127.0.0.1:"), std::string::npos) << busy.err;
  // Every waiting request holds an HTTP thread: a queue past 4096 would ask for that many threads.
  const CommandResult huge = run_k3("serve --port 0 --max-queue 100000000 --model " + plain_model_dir());
  EXPECT_NE(huge.exit_code, 0) << huge.err;
  EXPECT_LT(huge.exit_code, 128) << huge.err;  // refused, not crashed
  EXPECT_NE(huge.err.find("--max-queue"), std::string::npos) << huge.err;
}

TEST(Server, Images) {
  httplib::Client cli = client(main_server());
  const std::string png = png_data_url(40, 28, 1);
  const auto image_chat = [&](std::vector<std::string> urls) {
    ojson parts = ojson::array({{{"type", "text"}, {"text", "What is in the picture?"}}});
    for (const std::string& u : urls) parts.push_back({{"type", "image_url"}, {"image_url", {{"url", u}}}});
    return ojson{{"messages", ojson::array({{{"role", "user"}, {"content", parts}}})}, {"max_tokens", 4},
                 {"temperature", 0}};
  };
  const Reply one = post(cli, "/v1/chat/completions", image_chat({png}));
  ASSERT_EQ(one.status, 200) << one.raw;
  const Reply none = post(cli, "/v1/chat/completions", image_chat({}));
  ASSERT_EQ(none.status, 200) << none.raw;
  EXPECT_GT(one.body["usage"]["prompt_tokens"].get<int>(), none.body["usage"]["prompt_tokens"].get<int>() + 1);
  // The image reaches the model: another image (same size, same prompt tokens) changes the logits,
  // visible as a different greedy continuation in at least one of a few tries.
  const ojson a = post(cli, "/tokenize", image_chat({png}))["tokens"];
  EXPECT_EQ(post(cli, "/tokenize", image_chat({png_data_url(40, 28, 2)}))["tokens"], a);
  bool differs = false;
  for (int seed = 2; seed < 6 && !differs; ++seed) {
    ojson x = image_chat({png_data_url(40, 28, seed)});
    ojson y = image_chat({png});
    for (ojson* r : {&x, &y}) {
      (*r)["max_tokens"] = 6;
      (*r)["ignore_eos"] = true;
    }
    differs = post(cli, "/v1/chat/completions", x)["choices"][0]["message"] !=
              post(cli, "/v1/chat/completions", y)["choices"][0]["message"];
  }
  EXPECT_TRUE(differs);

  expect_envelope(post(cli, "/v1/chat/completions", image_chat({png, png, png})), 400, "more than 2 images");
  expect_envelope(post(cli, "/v1/chat/completions", image_chat({"https://example.com/cat.png"})), 400,
                  "does not download images from http(s) URLs");
  expect_envelope(post(cli, "/v1/chat/completions", image_chat({"data:image/png;base64,@@@@"})), 400, "base64");
  expect_envelope(post(cli, "/v1/chat/completions", image_chat({"data:image/png;base64,aGVsbG8="})), 400,
                  "image_url 1");
  expect_envelope(post(cli, "/v1/chat/completions", image_chat({png_data_url(600, 400, 1)})), 400, "pixels");
  const std::string big = "data:image/png;base64," + std::string(300 << 10, 'A');
  expect_envelope(post(cli, "/v1/chat/completions", image_chat({big})), 413, "limit");

  ServerProcess plain({"--model", plain_model_dir(), "--served-model-name", "m"});
  httplib::Client pc = client(plain);
  expect_envelope(post(pc, "/v1/chat/completions", image_chat({png})), 400, "has no vision tower");
}

// Request bodies, whatever their framing or Content-Type.

// A POST with Transfer-Encoding: chunked (no Content-Length), in 64 KiB chunks.
Reply post_chunked(httplib::Client& cli, const std::string& path, const std::string& body) {
  const httplib::ContentProviderWithoutLength provide = [&](size_t offset, httplib::DataSink& sink) {
    if (offset >= body.size()) {
      sink.done();
      return true;
    }
    return sink.write(body.data() + offset, std::min<size_t>(64 << 10, body.size() - offset));
  };
  return to_reply(cli.Post(path, provide, "application/json"));
}

// One request over a plain socket, for what httplib's client never sends (a POST that declares no
// body at all).  Connection: close, so the reply ends with the connection.
// wait_s: how long a server that does not answer (or close) may take before the test fails
// instead of hanging.
Reply raw_request(int port, const std::string& request, int wait_s = 120) {
  Reply out;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return out;
  timeval tv{};
  tv.tv_sec = wait_s;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string raw;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) raw.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  const size_t head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || head_end == std::string::npos) {
    out.raw = raw;
    return out;
  }
  out.status = std::atoi(raw.c_str() + 9);
  out.raw = raw.substr(head_end + 4);
  out.body = ojson::parse(out.raw, nullptr, /*allow_exceptions=*/false);
  if (out.body.is_discarded()) out.body = nullptr;
  return out;
}

// curl's default Content-Type is application/x-www-form-urlencoded; httplib used to parse such a
// body as a form and refuse one over 8 KiB with a false 413.  It is JSON like any other.
TEST(Server, FormUrlencodedBodiesAreJson) {
  httplib::Client cli = client(main_server());
  ojson b = chat_body("hello", 2);
  b["user"] = std::string(12 << 10, 'u');  // 12 KiB that does not reach the prompt
  const Reply chat = post_raw(cli, "/v1/chat/completions", b.dump(), "application/x-www-form-urlencoded");
  ASSERT_EQ(chat.status, 200) << chat.raw;
  EXPECT_EQ(chat.body["object"], "chat.completion");
  const std::string padded = ojson{{"prompt", "a b c"}}.dump() + std::string(10 << 10, ' ');
  const Reply tok = post_raw(cli, "/tokenize", padded, "application/x-www-form-urlencoded");
  ASSERT_EQ(tok.status, 200) << tok.raw;
  EXPECT_GT(tok.body["count"].get<int>(), 0);
  expect_envelope(post_raw(cli, "/tokenize", "a=1&b=2", "application/x-www-form-urlencoded"), 400, "not valid JSON");
}

// A chunked body counts against --max-body-mb (1 here) as it arrives; it used to be read whole.
TEST(Server, ChunkedBodiesHaveTheSizeLimit) {
  httplib::Client cli = client(main_server());
  const Reply small = post_chunked(cli, "/v1/chat/completions", chat_body("hello", 2).dump());
  ASSERT_EQ(small.status, 200) << small.raw;
  EXPECT_EQ(small.body["object"], "chat.completion");
  // 1.5 MiB of JSON whitespace around a valid request: over the limit however it ends.
  const std::string big = std::string(3 << 19, ' ') + chat_body("hello", 2).dump();
  const Reply r = post_chunked(cli, "/v1/chat/completions", big);
  expect_envelope(r, 413, "larger than the limit");
  EXPECT_EQ(r.body["error"]["code"], "request_too_large");
  expect_envelope(post_chunked(cli, "/tokenize", big), 413, "larger than the limit");
  EXPECT_EQ(post(cli, "/v1/chat/completions", chat_body("still fine", 2)).status, 200);
}

// A request without a body, or that declares none (no Content-Length, not chunked), is answered at
// once with an envelope that says so; httplib used to wait for the client to close, then send a
// bare "HTTP 400".  A wrong method stays 405, an unknown path 404.
TEST(Server, MissingBodies) {
  httplib::Client cli = client(main_server());
  const int port = main_server().port();
  const auto bodiless = [&](const std::string& method, const std::string& path) {
    return raw_request(port, method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  };
  for (const char* path : {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"}) {
    SCOPED_TRACE(path);
    const Reply r = bodiless("POST", path);
    expect_envelope(r, 411, "request body is required");
    EXPECT_EQ(r.body["error"]["code"], "length_required");
  }
  expect_envelope(bodiless("POST", "/health"), 405, "not allowed");
  expect_envelope(bodiless("PUT", "/v1/completions"), 405, "not allowed");
  expect_envelope(bodiless("POST", "/v2/nothing"), 404, "no route");
  // Content-Length: 0 (httplib's client sends that for an empty body).
  expect_envelope(post_raw(cli, "/v1/completions", "", "application/json"), 400, "body is empty");
  expect_envelope(post_raw(cli, "/health", "", "application/json"), 405, "not allowed");
  EXPECT_EQ(post(cli, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}}).status, 200);
}

// Content-Length values httplib would wait on are answered before any body byte: one that is not
// a byte count ("-5" read as 2^64 - 5, a 413 after the 30 s read timeout) is a 400, one far over
// the limit a 413, and a client that asks first (Expect: 100-continue) hears the 413 instead of
// "100 Continue".  The replies come well within the server's 30 s read timeout (else the 20 s
// wait here fails the test).
TEST(Server, DeclaredLengthsAreCheckedBeforeTheBody) {
  const int port = main_server().port();  // --max-body-mb 1
  const auto declared = [&](const std::string& length, const std::string& extra = "") {
    return raw_request(port,
                       "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                       "Content-Type: application/json\r\n"
                       "Content-Length: " + length + "\r\n" + extra + "\r\n",
                       20);
  };
  for (const char* bad : {"-5", "12abc", "0x10", "+7"}) {
    SCOPED_TRACE(bad);
    const Reply r = declared(bad);
    expect_envelope(r, 400, "not a byte count");
    EXPECT_EQ(r.body["error"]["code"], "invalid_body");
  }
  for (const std::string& big : {std::to_string(50 << 20), std::string("99999999999999999999999")}) {
    SCOPED_TRACE(big);
    expect_envelope(declared(big), 413, "larger than the limit");
  }
  const Reply asked = declared(std::to_string(2 << 20), "Expect: 100-continue\r\n");
  expect_envelope(asked, 413, "larger than the limit");
  EXPECT_EQ(asked.raw.find("100 Continue"), std::string::npos);
  expect_envelope(declared("-1", "Expect: 100-continue\r\n"), 400, "not a byte count");
  httplib::Client cli = client(main_server());
  EXPECT_EQ(post(cli, "/v1/chat/completions", chat_body("still fine", 2)).status, 200);
}

}  // namespace
}  // namespace k3::testing
