// `k3 serve` on the trained demo model (models/k3-demo): a model that writes English and closes
// its own channels, so the chat parser, the constraints and the caches are checked on the kind of
// text users see rather than on random tokens: a greedy reply ends by itself with reasoning and
// content apart and no markup; a json_schema reply and required tool calls (one, or several
// when parallel calls are allowed) come out valid without any logit bias; the same requests give the same text one at a time, all at once
// (continuous batching) and again from the prompt-prefix cache.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "server/server_process.h"
#include "server/server_test_util.h"
#include "support/test_support.h"

namespace k3::testing {
namespace {

const ServerProcess& demo_server() {
  static std::unique_ptr<ServerProcess> s = std::make_unique<ServerProcess>(std::vector<std::string>{
      "--model", demo_model_dir(), "--max-batch", "8", "--ctx", "1024", "--served-model-name", "demo",
      // Prompt-prefix cache points fall on chunk boundaries: chunks of 32 let these ~90-token chat
      // prompts share their system prefix and repeat their own.
      "--prefill-chunk", "32"});
  return *s;
}

ojson ask(const std::string& question, int max_tokens = 200) {
  return {{"model", "demo"},
          {"messages", ojson::array({{{"role", "user"}, {"content", question}}})},
          {"max_tokens", max_tokens},
          {"temperature", 0}};
}

TEST(DemoModelServer, GreedyReplyClosesItsChannels) {
  httplib::Client cli = client(demo_server());
  for (const char* q : {"What does ephemeral mean?", "Hello! What can you do?", "Tell me a fortune."}) {
    const Reply r = post(cli, "/v1/chat/completions", ask(q));
    ASSERT_EQ(r.status, 200) << r.raw;
    const ojson& choice = r.body["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "stop") << r.raw;
    const std::string content = choice["message"]["content"].get<std::string>();
    const std::string reasoning = choice["message"]["reasoning_content"].get<std::string>();
    EXPECT_FALSE(content.empty()) << r.raw;
    EXPECT_FALSE(reasoning.empty()) << r.raw;
    EXPECT_EQ(content.find("<|"), std::string::npos) << content;
    EXPECT_EQ(reasoning.find("<|"), std::string::npos) << reasoning;
  }
}

TEST(DemoModelServer, JsonSchemaReplyIsValidWithoutHelp) {
  httplib::Client cli = client(demo_server());
  const ojson schema = ojson::parse(R"({"type": "object",
      "properties": {"word": {"type": "string"},
                     "part_of_speech": {"enum": ["noun", "verb", "adjective", "adverb"]},
                     "meaning": {"type": "string"}},
      "required": ["word", "part_of_speech", "meaning"], "additionalProperties": false})");
  ojson b = ask("What does ephemeral mean? Answer in JSON.", 300);
  b["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "w"}, {"schema", schema}, {"strict", true}}}};
  const Reply r = post(cli, "/v1/chat/completions", b);
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop") << r.raw;
  const ojson v = ojson::parse(r.body["choices"][0]["message"]["content"].get<std::string>());
  ASSERT_TRUE(v.is_object() && v.size() == 3) << v;
  EXPECT_TRUE(v["word"].is_string() && v["meaning"].is_string()) << v;
  EXPECT_TRUE(v["part_of_speech"].is_string()) << v;
}

TEST(DemoModelServer, RequiredToolCallIsWellFormed) {
  httplib::Client cli = client(demo_server());
  ojson b = ask("What does ephemeral mean?", 300);
  b["tools"] = ojson::parse(R"([{"type": "function", "function": {"name": "dictionary_lookup",
      "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}}])");
  b["tool_choice"] = "required";
  for (const bool parallel : {true, false}) {
    b["parallel_tool_calls"] = parallel;
    const Reply r = post(cli, "/v1/chat/completions", b);
    ASSERT_EQ(r.status, 200) << r.raw;
    const ojson& choice = r.body["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << r.raw;
    const ojson& calls = choice["message"]["tool_calls"];
    ASSERT_GE(calls.size(), 1u) << r.raw;
    if (!parallel) {
      EXPECT_EQ(calls.size(), 1u) << r.raw;
    }
    for (const ojson& call : calls) {
      EXPECT_EQ(call["function"]["name"], "dictionary_lookup");
      const ojson args = ojson::parse(call["function"]["arguments"].get<std::string>());
      EXPECT_TRUE(args.is_object() && args.contains("word") && args["word"].is_string()) << args;
    }
  }
}

TEST(DemoModelServer, SameTextAloneBatchedAndFromThePrefixCache) {
  const std::vector<std::string> questions = {
      "What does ephemeral mean?", "Define the noun lighthouse.", "Quote John 3:16.", "Tell me a fortune.",
      "What is a harbor?", "Hello! What can you do?", "What does it mean to wander?", "Say something wise."};
  const auto text = [](const Reply& r) {
    const ojson& m = r.body["choices"][0]["message"];
    return m["reasoning_content"].dump() + "|" + m["content"].dump();
  };
  httplib::Client cli = client(demo_server());
  std::vector<std::string> alone, together(questions.size()), again;
  for (const std::string& q : questions) {
    const Reply r = post(cli, "/v1/chat/completions", ask(q, 120));
    ASSERT_EQ(r.status, 200) << r.raw;
    alone.push_back(text(r));
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < questions.size(); ++i)
    threads.emplace_back([&, i] {
      httplib::Client c = client(demo_server());
      together[i] = text(post(c, "/v1/chat/completions", ask(questions[i], 120)));
    });
  for (auto& t : threads) t.join();
  for (const std::string& q : questions) again.push_back(text(post(cli, "/v1/chat/completions", ask(q, 120))));
  for (size_t i = 0; i < questions.size(); ++i) {
    EXPECT_EQ(together[i], alone[i]) << questions[i];
    EXPECT_EQ(again[i], alone[i]) << questions[i];
  }
  // The shared system prefix and the repeated questions were served from the cache.
  const Reply m = get(cli, "/metrics");
  EXPECT_GT(metric(m.raw, "k3_prompt_tokens_cached_total"), 0) << m.raw.substr(0, 2000);
}

}  // namespace
}  // namespace k3::testing
