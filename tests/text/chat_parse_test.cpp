// The streaming output parser against fixtures/chat/completions.jsonl (vLLM's kimi_k3 parsers),
// fed three ways: whole, streamed in small pieces, and as token ids through a tokenizer.
#include <gtest/gtest.h>

#include <iostream>
#include <set>

#include "text/chat_output_parser.h"
#include "text/chat_request.h"
#include "text/special_tokens.h"
#include "text/synth_tokenizer.h"
#include "text/utf8.h"
#include "text_test_util.h"

namespace k3 {
namespace {

const SpecialTokens& k3_specials() {
  static const SpecialTokens s = SpecialTokens::k3_defaults(163584);
  return s;
}

ChatParserOptions options_for(const ojson& ctx) {
  ChatParserOptions o;
  o.thinking = ctx.at("thinking").get<bool>();
  o.parse_tools = ctx.at("request_has_tools").get<bool>() && ctx.at("tool_choice") != "none";
  return o;
}

struct Streamed {
  std::string reasoning, content;
  std::vector<ParsedToolCall> calls;
  void add(const ChatDelta& d) {
    EXPECT_TRUE(utf8::is_valid(d.reasoning) && utf8::is_valid(d.content)) << "deltas are whole UTF-8 characters";
    reasoning += d.reasoning;
    content += d.content;
    calls.insert(calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  }
};

// Feeds `text` (specials written literally) as specials and single bytes of text (so characters
// arrive split, as token bytes can).
ParsedChatMessage parse_streamed(const std::string& text, const ChatParserOptions& o, Streamed& s) {
  ChatOutputParser p(o);
  size_t pos = 0;
  while (pos < text.size()) {
    const std::optional<SpecialMatch> m = k3_specials().find(text, pos);
    const size_t end = m ? m->pos : text.size();
    for (; pos < end; ++pos) s.add(p.feed_text(std::string_view(text).substr(pos, 1)));
    if (!m) break;
    s.add(p.feed_special(std::string_view(text).substr(m->pos, m->len)));
    pos = m->pos + m->len;
  }
  ChatDelta last;
  ParsedChatMessage msg = p.finish(&last);
  s.add(last);
  return msg;
}

ojson opt_json(const std::optional<std::string>& s) { return s ? ojson(*s) : ojson(nullptr); }

// Compares a parse with the expected OpenAI message; true when equal.
bool matches(const std::string& what, const ParsedChatMessage& got, const ojson& want) {
  EXPECT_EQ(opt_json(got.reasoning_content), want.at("reasoning_content")) << what;
  EXPECT_EQ(opt_json(got.content), want.at("content")) << what;
  const ojson& calls = want.at("tool_calls");
  EXPECT_EQ(got.tool_calls.size(), calls.size()) << what;
  bool ok = opt_json(got.reasoning_content) == want["reasoning_content"] && opt_json(got.content) == want["content"] &&
            got.tool_calls.size() == calls.size();
  std::set<std::string> ids;
  for (size_t i = 0; i < std::min(got.tool_calls.size(), calls.size()); ++i) {
    const ParsedToolCall& c = got.tool_calls[i];
    EXPECT_EQ(c.name, calls[i]["function"]["name"].get<std::string>()) << what;
    EXPECT_EQ(c.arguments, calls[i]["function"]["arguments"].get<std::string>()) << what << " call " << i;
    EXPECT_EQ(c.index, static_cast<int>(i)) << what;
    EXPECT_EQ(c.id.rfind("chatcmpl-tool-", 0), 0u) << what << " id " << c.id;
    EXPECT_EQ(c.id.size(), 14u + 32u) << what;
    ids.insert(c.id);
    ok &= c.name == calls[i]["function"]["name"] && c.arguments == calls[i]["function"]["arguments"];
  }
  EXPECT_EQ(ids.size(), got.tool_calls.size()) << what << ": ids must be unique";
  return ok;
}

TEST(ChatParse, AllFixtureCompletions) {
  const std::vector<ojson> rows = testing::read_jsonl(testing::chat_fixture("completions.jsonl"));
  ASSERT_EQ(rows.size(), 23u);
  int whole = 0, streamed = 0, flagged = 0, well_formed = 0;
  for (const ojson& row : rows) {
    const std::string name = row.at("name").get<std::string>();
    const std::string completion = row.at("completion").get<std::string>();
    const ChatParserOptions o = options_for(row.at("context"));
    const bool wf = row.at("well_formed").get<bool>();
    well_formed += wf;

    ChatOutputParser p(o);
    p.feed_with_specials(completion, k3_specials());
    const ParsedChatMessage msg = p.finish();
    whole += matches(name, msg, row.at("expected"));
    EXPECT_EQ(msg.degraded, !wf) << name << ": degraded flag";
    EXPECT_EQ(msg.stopped, row.at("finish_reason") == "stop") << name;
    flagged += msg.degraded == !wf;

    Streamed s;
    const ParsedChatMessage smsg = parse_streamed(completion, o, s);
    bool ok = matches(name + " (streamed, final)", smsg, row.at("expected"));
    // Well-formed or not, the deltas concatenate to the expected message: a reply reads the same
    // streamed or not (fixtures/chat/README.md, truncated_in_think).
    const ojson& want = row["expected"];
    const std::string want_reasoning = want["reasoning_content"].is_null() ? "" : want["reasoning_content"].get<std::string>();
    const std::string want_content = want["content"].is_null() ? "" : want["content"].get<std::string>();
    EXPECT_EQ(s.reasoning, want_reasoning) << name;
    EXPECT_EQ(s.content, want_content) << name;
    ok &= s.reasoning == want_reasoning && s.content == want_content;
    ASSERT_EQ(s.calls.size(), want["tool_calls"].size()) << name;
    for (size_t i = 0; i < s.calls.size(); ++i) {
      EXPECT_EQ(s.calls[i].arguments, want["tool_calls"][i]["function"]["arguments"].get<std::string>()) << name;
      EXPECT_EQ(s.calls[i].id, smsg.tool_calls[i].id) << name;
      ok &= s.calls[i].arguments == want["tool_calls"][i]["function"]["arguments"];
    }
    streamed += ok;
  }
  EXPECT_EQ(whole, 23);
  EXPECT_EQ(streamed, 23);
  EXPECT_EQ(flagged, 23);
  std::cout << "[fixture] completions.jsonl: " << whole << "/23 parsed, " << streamed << "/23 streamed, " << flagged
            << "/23 well_formed flags (" << well_formed << " well-formed)\n";
}

TEST(ChatParse, FixtureCompletionsAsTokenIds) {
  testing::TempDir dir;
  write_synth_tokenizer(dir.path(), 2048);
  const Tokenizer tok = Tokenizer::from_model_dir(dir.path());
  int passed = 0;
  for (const ojson& row : testing::read_jsonl(testing::chat_fixture("completions.jsonl"))) {
    const std::string name = row.at("name").get<std::string>();
    ChatOutputParser p(options_for(row.at("context")), &tok);
    Streamed s;
    for (int32_t id : tok.encode(row.at("completion").get<std::string>(), /*allow_special=*/true)) s.add(p.feed_token(id));
    const ParsedChatMessage msg = p.finish();
    passed += matches(name + " (ids)", msg, row.at("expected"));
    EXPECT_EQ(msg.degraded, !row.at("well_formed").get<bool>()) << name;
  }
  EXPECT_EQ(passed, 23);
}

TEST(ChatParse, StopTokenOtherThanEndOfMessageNeverReachesTheContent) {
  testing::TempDir dir;
  write_synth_tokenizer(dir.path(), 2048);
  const Tokenizer tok = Tokenizer::from_model_dir(dir.path());
  const std::optional<int32_t> eos = tok.special_id("[EOS]");
  ASSERT_TRUE(eos.has_value());
  ChatParserOptions o;
  o.thinking = false;
  // A reply that ends with [EOS] instead of closing the message: the text so far, no "[EOS]".
  ChatOutputParser p(o, &tok);
  for (int32_t id : tok.encode("hello", /*allow_special=*/true)) p.feed_token(id);
  p.feed_stop_token(*eos);
  const ParsedChatMessage m = p.finish();
  EXPECT_EQ(m.content, "hello");
  EXPECT_TRUE(m.degraded);  // the message was cut short
  // Fed as an ordinary token, the same id is literal text (what the chat paths used to do).
  ChatOutputParser q(o, &tok);
  for (int32_t id : tok.encode("hello", /*allow_special=*/true)) q.feed_token(id);
  q.feed_token(*eos);
  EXPECT_EQ(q.finish().content, "hello[EOS]");
  // <|end_of_msg|> as the stop token is itself.
  ChatOutputParser r(o, &tok);
  const std::vector<int32_t> ids =
      tok.encode("hi<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>", true);
  for (size_t i = 0; i + 1 < ids.size(); ++i) r.feed_token(ids[i]);
  r.feed_stop_token(ids.back());
  const ParsedChatMessage rm = r.finish();
  EXPECT_EQ(rm.content, "hi");
  EXPECT_FALSE(rm.degraded);
}

ParsedChatMessage parse(const std::string& text, bool thinking = true, bool tools = true) {
  ChatParserOptions o;
  o.thinking = thinking;
  o.parse_tools = tools;
  ChatOutputParser p(o);
  p.feed_with_specials(text, k3_specials());
  return p.finish();
}

TEST(ChatParseAdversarial, UnterminatedToolCallIsDropped) {
  const ParsedChatMessage m = parse(
      "r<|close|>think<|sep|><|open|>response<|sep|>Calling<|close|>response<|sep|><|open|>tools<|sep|>"
      "<|open|>call tool=\"f\" index=\"1\"<|sep|><|open|>argument key=\"a\" type=\"string\"<|sep|>x<|close|>argument<|sep|>"
      "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>");
  EXPECT_TRUE(m.degraded);
  EXPECT_TRUE(m.tool_calls.empty());
  ASSERT_TRUE(m.content.has_value());
  EXPECT_EQ(m.content->rfind("Calling", 0), 0u);  // the broken call's text follows as content
  EXPECT_NE(m.content->find("tool=\"f\""), std::string::npos);
}

TEST(ChatParseAdversarial, NestedOpenInsideACall) {
  const ParsedChatMessage m = parse(
      "<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
      "<|open|>call tool=\"a\" index=\"1\"<|sep|><|open|>argument key=\"x\" type=\"string\"<|sep|>v"
      "<|open|>call tool=\"b\" index=\"2\"<|sep|><|open|>argument key=\"y\" type=\"number\"<|sep|>2<|close|>argument<|sep|>"
      "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>");
  EXPECT_TRUE(m.degraded);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "b");
  EXPECT_EQ(m.tool_calls[0].arguments, "{\"y\": 2}");
  ASSERT_TRUE(m.content.has_value());
  EXPECT_NE(m.content->find("tool=\"a\""), std::string::npos) << *m.content;
}

TEST(ChatParseAdversarial, NestedOpenInsideATagHeader) {
  const ParsedChatMessage m =
      parse("t<|close|>think<|sep|><|open|>resp<|open|>response<|sep|>ok<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>");
  EXPECT_TRUE(m.degraded);
  EXPECT_EQ(m.reasoning_content, std::optional<std::string>("t"));
  EXPECT_EQ(m.content, std::optional<std::string>("ok"));
}

TEST(ChatParseAdversarial, ArgumentsThatAreNotJson) {
  const ParsedChatMessage m = parse(
      "<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
      "<|open|>call tool=\"f\" index=\"1\"<|sep|><|open|>argument key=\"a\" type=\"array\"<|sep|>[1,<|close|>argument<|sep|>"
      "<|open|>argument key=\"b\" type=\"boolean\"<|sep|>yes<|close|>argument<|sep|>"
      "<|open|>argument key=\"c\" type=\"object\"<|sep|>{\"k\": NaN}<|close|>argument<|sep|>"
      "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>");
  EXPECT_FALSE(m.degraded);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"a": "[1,", "b": "yes", "c": "{\"k\": NaN}"})");
  EXPECT_TRUE(ojson::parse(m.tool_calls[0].arguments).is_object());
}

TEST(ChatParseAdversarial, DeeplyNestedArgumentStaysAString) {
  // A model that emits 100k '[' as an array argument: the value is kept as its raw text (it used
  // to be parsed and re-dumped recursively, overflowing the stack).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const ParsedChatMessage m = parse(
      "<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
      "<|open|>call tool=\"f\" index=\"1\"<|sep|><|open|>argument key=\"a\" type=\"array\"<|sep|>" +
      deep + "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, "{\"a\": \"" + deep + "\"}");
}

TEST(ChatParseAdversarial, SpecialTokensInsideContent) {
  const ParsedChatMessage m = parse(
      "<|close|>think<|sep|><|open|>response<|sep|>see <|media_pad|> and <|sep|> here<|close|>response<|sep|>"
      "<|close|>message<|sep|><|end_of_msg|>");
  EXPECT_TRUE(m.degraded);
  EXPECT_EQ(m.content, std::optional<std::string>("see <|media_pad|> and <|sep|> here"));
}

TEST(ChatParseAdversarial, AnswerWithoutThinkBlock) {
  const ParsedChatMessage m = parse("<|open|>response<|sep|>Hi there<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>");
  EXPECT_TRUE(m.degraded);
  EXPECT_FALSE(m.reasoning_content.has_value());
  EXPECT_EQ(m.content, std::optional<std::string>("Hi there"));
  // Without thinking, text closed by the message alone is content.
  const ParsedChatMessage bare = parse("Just text.<|close|>message<|sep|><|end_of_msg|>", /*thinking=*/false);
  EXPECT_TRUE(bare.degraded);
  EXPECT_FALSE(bare.reasoning_content.has_value());
  EXPECT_EQ(bare.content, std::optional<std::string>("Just text."));
}

// A think channel that never closes is reasoning, whether the output stops inside it (max_tokens,
// or a stop token) or closes the message from inside it, and the deltas said the same.
TEST(ChatParseAdversarial, UnclosedThinkChannelIsReasoningStreamedOrNot) {
  for (const std::string text : {"still thinking", "still thinking<|end_of_msg|>",
                                 "still thinking<|close|>message<|sep|><|end_of_msg|>"}) {
    SCOPED_TRACE(text);
    const ParsedChatMessage whole = parse(text);
    EXPECT_TRUE(whole.degraded);
    EXPECT_EQ(whole.reasoning_content, std::optional<std::string>("still thinking"));
    EXPECT_FALSE(whole.content.has_value());
    Streamed s;
    ChatParserOptions o;
    o.parse_tools = true;
    const ParsedChatMessage streamed = parse_streamed(text, o, s);
    EXPECT_EQ(s.reasoning, "still thinking");
    EXPECT_EQ(s.content, "");
    EXPECT_EQ(streamed.reasoning_content, whole.reasoning_content);
    EXPECT_EQ(streamed.content, whole.content);
  }
}

// Stray text inside the tools channel or a call is content, whole, whether it arrives in one
// piece or token by token; only a run between two tags that is all whitespace is dropped.
// (Streamed byte by byte, the spaces inside "{\"a\": [1, 2]}" used to be dropped, one blank
// piece at a time: found by fuzz/output_parser_fuzz.cpp.)
TEST(ChatParseAdversarial, StrayTextInToolsIsKeptWholeStreamedOrNot) {
  const std::string text =
      "<|close|>think<|sep|><|open|>response<|sep|>ok<|close|>response<|sep|><|open|>tools<|sep|>\n"
      "<|open|>call tool=\"f\" index=\"1\"<|sep|> {\"a\": [1, 2]} <|close|>call<|sep|>\n \n"
      "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>";
  const ParsedChatMessage whole = parse(text);
  EXPECT_TRUE(whole.degraded);
  EXPECT_EQ(whole.content, std::optional<std::string>("ok {\"a\": [1, 2]} "));
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  EXPECT_EQ(whole.tool_calls[0].arguments, "{}");
  Streamed s;
  ChatParserOptions o;
  o.parse_tools = true;
  const ParsedChatMessage streamed = parse_streamed(text, o, s);
  EXPECT_EQ(streamed.content, whole.content);
  EXPECT_EQ(s.content, *whole.content);
  EXPECT_EQ(streamed.tool_calls.size(), 1u);
}

TEST(ChatParseAdversarial, GarbageNeverThrows) {
  const std::vector<std::string> inputs = {
      "", "<|sep|>", "<|close|>", "<|open|>", "<|end_of_msg|>", "<|end_of_msg|>after", "<|open|><|open|><|sep|><|sep|>",
      "<|close|>think<|sep|><|close|>think<|sep|><|open|>tools<|sep|><|close|>call<|sep|><|open|>call<|sep|>",
      "<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"x\" "
      "index=\"1\"<|sep|><|open|>json type=\"object\"<|sep|>{<|close|>message<|sep|>",
      "<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=bad<|sep|><|close|>call<|sep|><|close|>tools<|sep|>",
      "\xE2\x82<|close|>think<|sep|><|open|>response<|sep|> \xF0\x9F<|open|>\xFF"};
  for (const std::string& in : inputs)
    for (bool thinking : {true, false}) {
      const ParsedChatMessage m = parse(in, thinking);
      EXPECT_TRUE(m.degraded) << in;
      EXPECT_NO_THROW(m.to_openai().dump()) << in;
    }
}

TEST(ChatParse, OptionsFromRequest) {
  const ChatParserOptions plain = chat_parser_options(parse_chat_request(ojson::parse(R"({"messages": []})")));
  EXPECT_TRUE(plain.thinking);
  EXPECT_FALSE(plain.parse_tools);
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  ojson body = {{"messages", ojson::array()}, {"tools", tools}, {"chat_template_kwargs", {{"thinking", false}}}};
  const ChatParserOptions with_tools = chat_parser_options(parse_chat_request(body));
  EXPECT_FALSE(with_tools.thinking);
  EXPECT_TRUE(with_tools.parse_tools);
  body["tool_choice"] = "none";
  EXPECT_FALSE(chat_parser_options(parse_chat_request(body)).parse_tools);
  body["tool_choice"] = "required";
  EXPECT_TRUE(chat_parser_options(parse_chat_request(body)).parse_tools);
}

TEST(ChatParse, OpenAiShape) {
  const ParsedChatMessage m = parse(
      "why<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\" "
      "index=\"1\"<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>");
  const ojson j = m.to_openai();
  EXPECT_EQ(j["role"], "assistant");
  EXPECT_TRUE(j["content"].is_null());
  EXPECT_EQ(j["reasoning_content"], "why");
  ASSERT_EQ(j["tool_calls"].size(), 1u);
  EXPECT_EQ(j["tool_calls"][0]["type"], "function");
  EXPECT_EQ(j["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(j["tool_calls"][0]["function"]["arguments"], "{}");
  EXPECT_FALSE(j["tool_calls"][0]["id"].get<std::string>().empty());
}

}  // namespace
}  // namespace k3
