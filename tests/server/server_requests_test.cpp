// `k3 serve` against requests that used to be mishandled, each checked end to end over HTTP on
// the synthetic tiny model (with its vision tower) and a 512-token context: stop tokens in chat
// content, the context bound (prompt + output), a 2^63 - 1 max_tokens, malformed tools and
// tool_choice, messages outside the chat format, reasoning_effort with thinking off, and an image
// too large for the context.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "server_test_util.h"

namespace k3::testing {
namespace {

constexpr int64_t kCtx = 512;

const ServerProcess& server() {
  static std::unique_ptr<ServerProcess> s = std::make_unique<ServerProcess>(std::vector<std::string>{
      "--model", vision_model_dir(), "--ctx", std::to_string(kCtx), "--max-image-mb", "16", "--max-body-mb", "32",
      "--max-image-pixels", "4000000", "--served-model-name", "m"});
  return *s;
}

void expect_error(const Reply& r, int status, const std::string& needle, const std::string& param) {
  SCOPED_TRACE(r.raw);
  EXPECT_EQ(r.status, status);
  ASSERT_TRUE(r.body.is_object() && r.body.contains("error"));
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find(needle), std::string::npos);
  if (param.empty())
    EXPECT_TRUE(r.body["error"]["param"].is_null());
  else
    EXPECT_EQ(r.body["error"]["param"], param);
}

ojson user(const std::string& text) { return ojson::array({{{"role", "user"}, {"content", text}}}); }

TEST(ServerRequests, StopTokenIsNotChatContent) {
  httplib::Client cli = client(server());
  const ojson eos = post(cli, "/tokenize", {{"prompt", "[EOS]"}})["tokens"];
  ASSERT_EQ(eos.size(), 1u) << eos;
  // [EOS] forced as the first token: the reply ends there with no "[EOS]" text in it.
  for (bool thinking : {false, true}) {
    SCOPED_TRACE(thinking);
    const Reply r = post(cli, "/v1/chat/completions",
                         {{"messages", user("hi")}, {"max_tokens", 5}, {"temperature", 0},
                          {"chat_template_kwargs", {{"thinking", thinking}}},
                          {"logit_bias", {{std::to_string(eos[0].get<int>()), 100}}}});
    ASSERT_EQ(r.status, 200) << r.raw;
    const ojson& msg = r.body["choices"][0]["message"];
    EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(msg["content"].is_string() ? msg["content"].get<std::string>().find("[EOS]") : std::string::npos,
              std::string::npos)
        << msg;
  }
}

TEST(ServerRequests, PromptPlusOutputFitTheContext) {
  httplib::Client cli = client(server());
  // No max_tokens, 2^63 - 1 (used to overflow the reservation and run to the model's full length),
  // and more than fits: each stops with prompt + output = the context.
  for (const ojson& max_tokens : {ojson(), ojson(INT64_MAX), ojson(1000)}) {
    SCOPED_TRACE(max_tokens.dump());
    ojson b = {{"prompt", "Once upon a time"}, {"ignore_eos", true}, {"temperature", 0}};
    if (!max_tokens.is_null()) b["max_tokens"] = max_tokens;
    if (max_tokens.is_null()) b["max_tokens"] = nullptr;
    const Reply r = post(cli, "/v1/completions", b);
    ASSERT_EQ(r.status, 200) << r.raw;
    if (max_tokens.is_null()) continue;  // (completions default to 16 tokens)
    EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(r.body["usage"]["total_tokens"], kCtx) << r.body["usage"];
  }
  const Reply chat = post(cli, "/v1/chat/completions",
                          {{"messages", user("hi")}, {"ignore_eos", true}, {"chat_template_kwargs", {{"thinking", false}}}});
  ASSERT_EQ(chat.status, 200) << chat.raw;
  EXPECT_EQ(chat.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(chat.body["usage"]["total_tokens"], kCtx) << chat.body["usage"];
}

TEST(ServerRequests, ToolsAndToolChoiceAreChecked) {
  httplib::Client cli = client(server());
  const ojson good = {{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}};
  const auto with_tools = [&](const ojson& tools, const ojson& choice = nullptr) {
    ojson b = {{"messages", user("hi")}, {"max_tokens", 2}};
    if (!tools.is_null()) b["tools"] = tools;
    if (!choice.is_null()) b["tool_choice"] = choice;
    return post(cli, "/v1/chat/completions", b);
  };
  const Reply ok = with_tools(ojson::array({good}));
  EXPECT_EQ(ok.status, 200) << ok.raw;
  expect_error(with_tools(ojson::array({"x"})), 400, "tools[0] must be an object", "tools");
  expect_error(with_tools(ojson::array({good, {{"type", "function"}}})), 400, "tools[1].function", "tools");
  expect_error(with_tools(ojson::array({{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", "zz"}}}}})),
               400, "parameters", "tools");
  expect_error(with_tools(ojson::array({{{"type", "web"}, {"function", {{"name", "f"}}}}})), 400, "type", "tools");
  expect_error(with_tools(nullptr, "required"), 400, "no tools", "tool_choice");
  expect_error(with_tools(nullptr, {{"type", "function"}, {"function", {{"name", "f"}}}}), 400, "no tools",
               "tool_choice");
  EXPECT_EQ(with_tools(nullptr, "none").status, 200);
  expect_error(with_tools(ojson::array({good, good})), 400, "tools[1].function.name 'f' is already declared by tools[0]",
               "tools");
}

// Messages the K3 encoder would render without complaint but no OpenAI client means: a role
// outside the chat format, a user message without content, a text part without text.  A
// developer message is skipped, as Moonshot's encoder does (logged), and the request is served.
TEST(ServerRequests, MessagesOutsideTheChatFormatAreRefused) {
  httplib::Client cli = client(server());
  const auto chat = [&](const ojson& messages, ojson extra = ojson::object()) {
    extra["messages"] = messages;
    extra["max_tokens"] = 1;
    return post(cli, "/v1/chat/completions", extra);
  };
  const ojson hi = {{"role", "user"}, {"content", "hi"}};
  for (const char* role : {"bogus", "function"})
    expect_error(chat(ojson::array({{{"role", role}, {"content", "x"}}, hi})), 400,
                 std::string("messages[0].role '") + role + "' is not one of system, user, assistant, tool", "messages");
  expect_error(chat(ojson::array({{{"role", "user"}}})), 400, "messages[0].content is missing", "messages");
  expect_error(chat(ojson::array({{{"role", "user"}, {"content", nullptr}}})), 400, "content is missing", "messages");
  expect_error(chat(ojson::array({{{"role", "user"}, {"content", ojson::array({{{"type", "text"}}})}}})), 400,
               "messages[0].content[0].text must be a string", "messages");
  expect_error(chat(ojson::array({hi}), {{"echo", true}}), 400, "echo is not supported", "echo");
  const Reply dev = chat(ojson::array({{{"role", "developer"}, {"content", "be brief"}}, hi}));
  ASSERT_EQ(dev.status, 200) << dev.raw;
  // A developer message is the system turn (OpenAI's newer name for it), not dropped.
  const Reply sys = chat(ojson::array({{{"role", "system"}, {"content", "be brief"}}, hi}));
  EXPECT_EQ(dev.body["usage"]["prompt_tokens"], sys.body["usage"]["prompt_tokens"]);
  EXPECT_GT(dev.body["usage"]["prompt_tokens"], chat(ojson::array({hi})).body["usage"]["prompt_tokens"]);
  // A request without messages names them.
  expect_error(post(cli, "/v1/chat/completions", ojson::object()), 400, "messages is required", "messages");
  // /tokenize takes one or the other.
  expect_error(post(cli, "/tokenize", {{"prompt", "a"}, {"messages", ojson::array({hi})}}), 400, "not both", "prompt");
}

TEST(ServerRequests, ReasoningEffortIsCheckedUnderItsName) {
  httplib::Client cli = client(server());
  for (bool thinking : {false, true})
    expect_error(post(cli, "/v1/chat/completions",
                      {{"messages", user("hi")}, {"max_tokens", 2}, {"reasoning_effort", "bogus"},
                       {"chat_template_kwargs", {{"thinking", thinking}}}}),
                 400, "reasoning_effort 'bogus'", "reasoning_effort");
  EXPECT_EQ(post(cli, "/v1/chat/completions", {{"messages", user("hi")}, {"max_tokens", 2}, {"reasoning_effort", "low"}})
                .status,
            200);
}

TEST(ServerRequests, ImageLargerThanTheContextIsRefusedUpFront) {
  httplib::Client cli = client(server());
  ojson parts = ojson::array({{{"type", "text"}, {"text", "What is it?"}},
                              {{"type", "image_url"}, {"image_url", {{"url", png_data_url(1536, 1536, 3)}}}}});
  expect_error(post(cli, "/v1/chat/completions",
                    {{"messages", ojson::array({{{"role", "user"}, {"content", parts}}})}, {"max_tokens", 2}}),
               400, "the images alone take", "messages");
  EXPECT_EQ(get(cli, "/health").status, 200);
}

TEST(ServerRequests, SchemaWhoseValuesCannotFinishIsRefused) {
  httplib::Client cli = client(server());
  // Every "a" needs another "a" inside it: the decoder used to generate into it, find no token to
  // go on with, and fail the request with a 500.
  const ojson schema = ojson::parse(R"({"type":"object","properties":{"a":{"$ref":"#/$defs/A"}},"required":["a"],
      "$defs":{"A":{"type":"object","properties":{"a":{"$ref":"#/$defs/A"}},"required":["a"]}}})");
  const ojson base = {{"messages", user("hi")}, {"max_tokens", 40}, {"temperature", 0},
                      {"chat_template_kwargs", {{"thinking", false}}}};
  ojson b = base;
  b["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}}}};
  const Reply r = post(cli, "/v1/chat/completions", b);
  expect_error(r, 400, "no value the decoder can produce satisfies the schema", "response_format");
  EXPECT_EQ(r.body["error"]["code"], "unsupported_schema");
  // As a strict tool's parameters: refused too; not strict, the arguments are left free.
  for (bool strict : {true, false}) {
    SCOPED_TRACE(strict);
    ojson t = base;
    t["tools"] = ojson::array({{{"type", "function"},
                                {"function", {{"name", "f"}, {"parameters", schema}, {"strict", strict}}}}});
    t["tool_choice"] = "required";
    const Reply tr = post(cli, "/v1/chat/completions", t);
    if (strict)
      expect_error(tr, 400, "no value the decoder can produce", "tools");
    else
      EXPECT_EQ(tr.status, 200) << tr.raw;
  }
}

TEST(ServerRequests, BearerSchemeIsCaseInsensitive) {
  ServerProcess s({"--model", plain_model_dir(), "--served-model-name", "m", "--api-key", "sesame"});
  httplib::Client cli = client(s);
  // RFC 9110: the scheme is case-insensitive ("bearer sesame" was refused as an invalid key).
  for (const char* auth : {"Bearer sesame", "bearer sesame", "BEARER sesame", "Bearer   sesame"})
    EXPECT_EQ(get(cli, "/v1/models", {{"Authorization", auth}}).status, 200) << auth;
  for (const char* auth : {"Bearer sesam", "Bearer sesamee", "Basic sesame", "sesame", "Bearer", "Bearersesame"})
    EXPECT_EQ(get(cli, "/v1/models", {{"Authorization", auth}}).status, 401) << auth;
  // OPTIONS on a path that exists: its methods, not "no route".
  const httplib::Result o = cli.Options("/v1/chat/completions", {{"Authorization", "Bearer sesame"}});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->status, 204);
  EXPECT_EQ(o->get_header_value("Allow"), "POST, OPTIONS");
  const httplib::Result h = cli.Options("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 204);
  EXPECT_EQ(h->get_header_value("Allow"), "GET, HEAD, OPTIONS");
  const httplib::Result n = cli.Options("/nowhere");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->status, 404);
}

TEST(ServerRequests, ContentEncodingIsDecodedOrRefused) {
  httplib::Client cli = client(server());
  const std::string body = R"({"prompt": "hi", "max_tokens": 1})";
  // An encoding httplib does not decode was passed through and parsed as JSON ("not valid JSON");
  // a body that does not decode was "a malformed chunk".
  for (const char* e : {"zstd", "gzip, br", "compress"}) {
    SCOPED_TRACE(e);
    const Reply r = to_reply(cli.Post("/v1/completions", {{"Content-Encoding", e}}, body, "application/json"));
    expect_error(r, 415, std::string("Content-Encoding '") + e + "' is not supported", "");
  }
  const Reply bad = to_reply(cli.Post("/v1/completions", {{"Content-Encoding", "gzip"}}, body, "application/json"));
  expect_error(bad, 400, "could not be decoded as Content-Encoding 'gzip'", "");
  EXPECT_EQ(to_reply(cli.Post("/v1/completions", {{"Content-Encoding", "identity"}}, body, "application/json")).status,
            200);
}

}  // namespace
}  // namespace k3::testing
