// The XTML renderer against fixtures/chat/expected.jsonl (the normative encoding_k3 renderings):
// every case through the renderer API, and again through the OpenAI request mapping.
#include <gtest/gtest.h>

#include <iostream>
#include <set>

#include "base/error.h"
#include "text/xtml_renderer.h"
#include "text_test_util.h"

namespace k3 {
namespace {

using testing::chat_fixture;
using testing::read_jsonl;

ChatOptions options_from_case(const ojson& o) {
  ChatOptions opt;
  opt.add_generation_prompt = o.at("add_generation_prompt").get<bool>();
  opt.thinking = o.at("thinking").get<bool>();
  opt.thinking_effort = o.at("thinking_effort").is_null() ? std::nullopt
                                                          : std::optional<std::string>(o["thinking_effort"].get<std::string>());
  opt.tool_choice = o.at("tool_choice");
  opt.response_format = o.at("response_format");
  if (!o.at("image_prompts").is_null()) opt.image_prompts = o["image_prompts"].get<std::vector<std::string>>();
  return opt;
}

std::vector<ChatSegment> expected_segments(const ojson& e) {
  std::vector<ChatSegment> segs;
  for (const ojson& s : e.at("segments")) segs.push_back({s.at("text").get<std::string>(), s.at("allow_special").get<bool>()});
  return segs;
}

// Compares one rendering; returns true when text and segments match exactly.
bool check_rendering(const std::string& what, const std::vector<ChatSegment>& got, const ojson& e) {
  const std::vector<ChatSegment> want = expected_segments(e);
  EXPECT_EQ(segments_text(got), e.at("text").get<std::string>()) << what;
  EXPECT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    EXPECT_EQ(got[i].text, want[i].text) << what << " segment " << i;
    EXPECT_EQ(got[i].allow_special, want[i].allow_special) << what << " segment " << i << " flag";
  }
  return got == want && segments_text(got) == e.at("text").get<std::string>();
}

TEST(ChatRender, AllFixtureCases) {
  const std::vector<ojson> cases = read_jsonl(chat_fixture("cases.jsonl"));
  const std::vector<ojson> expected = read_jsonl(chat_fixture("expected.jsonl"));
  ASSERT_EQ(cases.size(), expected.size());
  int passed = 0, via_request = 0, request_passed = 0, errors = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const ojson& c = cases[i];
    const ojson& e = expected[i];
    const std::string name = c.at("name").get<std::string>();
    ASSERT_EQ(e.at("name").get<std::string>(), name);
    const bool want_error = e.contains("error");
    EXPECT_EQ(want_error, c.value("expect_error", false)) << name;
    const ChatOptions options = options_from_case(c.at("options"));
    if (want_error) {
      ++errors;
      bool threw = false;
      try {
        render_chat(c.at("messages"), c.at("tools"), options);
      } catch (const Error& err) {
        threw = true;
        EXPECT_FALSE(std::string(err.what()).empty());
      }
      EXPECT_TRUE(threw) << name << " must be rejected";
      passed += threw;
    } else {
      passed += check_rendering(name, render_chat(c.at("messages"), c.at("tools"), options), e);
    }
    if (c.at("request").is_null()) continue;
    ++via_request;
    if (want_error) {
      EXPECT_THROW(render_chat(parse_chat_request(c["request"])), Error) << name << " (request)";
      request_passed += 1;
    } else {
      request_passed += check_rendering(name + " (request)", render_chat(parse_chat_request(c["request"])), e);
    }
  }
  EXPECT_EQ(passed, 51);
  EXPECT_EQ(errors, 4);
  std::cout << "[fixture] chat expected.jsonl: " << passed << "/" << cases.size() << " passed (" << errors
            << " rejections); via request: " << request_passed << "/" << via_request << "\n";
}

// expected_c5d1dd4.jsonl: the same cases rendered by vLLM's condensed copy of encoding_k3.py
// (informational; fixtures/chat/README.md, "Two encoder copies").  Its attributes are one
// segment instead of four, so only the text is compared: k3 (which follows the normative copy)
// must render the same text in every case but the two the README lists as differences, and
// reject the same four inputs.
TEST(ChatRender, AgreesWithTheCondensedCopyWhereTheFixturesSay) {
  const std::vector<ojson> cases = read_jsonl(chat_fixture("cases.jsonl"));
  const std::vector<ojson> other = read_jsonl(chat_fixture("expected_c5d1dd4.jsonl"));
  ASSERT_EQ(cases.size(), other.size());
  const std::set<std::string> differ = {"assistant_name", "tool_results_unresolved_run"};
  int same = 0, different = 0, rejected = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const ojson& c = cases[i];
    const ojson& e = other[i];
    const std::string name = c.at("name").get<std::string>();
    ASSERT_EQ(e.at("name").get<std::string>(), name);
    const ChatOptions options = options_from_case(c.at("options"));
    if (e.contains("error")) {
      EXPECT_THROW(render_chat(c.at("messages"), c.at("tools"), options), Error) << name;
      ++rejected;
      continue;
    }
    const std::string text = segments_text(render_chat(c.at("messages"), c.at("tools"), options));
    if (differ.count(name) != 0) {
      EXPECT_NE(text, e.at("text").get<std::string>()) << name << ": a documented difference of the condensed copy";
      ++different;
    } else {
      EXPECT_EQ(text, e.at("text").get<std::string>()) << name;
      ++same;
    }
  }
  EXPECT_EQ(rejected, 4);
  EXPECT_EQ(different, 2);
  EXPECT_EQ(same, 45);
}

TEST(ChatRender, ErrorsNameTheProblem) {
  const ojson user = ojson::array({{{"role", "user"}, {"content", "Hi"}}});
  ChatOptions o;
  o.thinking_effort = "medium";
  try {
    render_chat(user, nullptr, o);
    FAIL() << "medium must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("thinking_effort"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("medium"), std::string::npos) << e.what();
  }
  const ojson bad_args = ojson::parse(
      R"([{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"z","function":{"name":"f","arguments":"[1, 2]"}}]}])");
  try {
    render_chat(bad_args, nullptr, ChatOptions{});
    FAIL() << "array arguments must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("messages[1].tool_calls[0].function.arguments"), std::string::npos) << e.what();
  }
  EXPECT_THROW(render_chat(ojson::parse(R"([{"content":"no role"}])"), nullptr, ChatOptions{}), Error);
  EXPECT_THROW(render_chat(ojson::parse(R"([{"role":"user","content":[{"type":"audio"}]}])"), nullptr, ChatOptions{}),
               Error);
  EXPECT_THROW(render_chat(ojson::parse(R"([{"role":"tool","content":"x"},{"role":5}])"), nullptr, ChatOptions{}), Error);
  EXPECT_THROW(render_chat(ojson::parse(R"([{"role":"assistant","tool_calls":[{"function":{"name":7}}]}])"), nullptr,
                           ChatOptions{}),
               Error);
  EXPECT_THROW(parse_chat_request(ojson::parse(R"({"messages":"hi"})")), Error);
  EXPECT_THROW(parse_chat_request(ojson::parse(R"({"messages":[],"tool_choice":{"type":3}})")), Error);
  EXPECT_THROW(parse_chat_request(ojson::parse(R"({"messages":[],"tool_choice":"sometimes"})")), Error);
  EXPECT_THROW(parse_chat_request(ojson::parse(R"({"messages":[],"response_format":{"type":"xml"}})")), Error);
  EXPECT_THROW(parse_chat_request(ojson::parse(R"({"messages":[],"chat_template_kwargs":{"thinking":"yes"}})")), Error);
}

TEST(ChatRender, ImagePromptCountMustMatch) {
  const ojson msgs = ojson::parse(R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}])");
  ChatOptions o;
  o.image_prompts = std::vector<std::string>{};
  EXPECT_THROW(render_chat(msgs, nullptr, o), Error);
  o.image_prompts = std::vector<std::string>{"<|media_begin|>a<|media_end|>", "<|media_begin|>b<|media_end|>"};
  EXPECT_THROW(render_chat(msgs, nullptr, o), Error);
}

}  // namespace
}  // namespace k3
