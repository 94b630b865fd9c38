// ChatToolConstraint on a synthetic K3 tokenizer: a scripted "model" (noise plus a large bonus
// on the next token of a script) is driven through the mask; the script's forbidden moves (an
// early end, a tool that does not exist, a message without a call, arguments the tool's schema
// refuses) are refused, and the chat output parser reads the result back with the forced calls.
// Random "models" over several parameter schemas check that every finished call's arguments
// satisfy its schema (support/json_schema_reference.h, independent of the recogniser).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/json_constraint.h"
#include "engine/tool_constraint.h"
#include "support/json_schema_reference.h"
#include "synth_vocab.h"
#include "text/chat_output_parser.h"
#include "text/tokenizer.h"

namespace k3 {
namespace {

class ToolConstraintTest : public ::testing::Test {
 protected:
  const Tokenizer* tok_ = &testing::SynthVocab::get().tok;
  std::shared_ptr<const VocabIndex> index_ = testing::SynthVocab::get().index;

  // Follows `script` (text with K3 specials) wherever the mask allows, skipping script tokens it
  // refuses; random allowed tokens once the script is used up.  The generated ids.
  std::vector<int32_t> drive(ChatToolConstraint& c, const std::string& script, int steps, uint32_t seed = 1) {
    const std::vector<int32_t> want = tok_->encode(script, true);
    const int32_t end = tok_->require_special("<|end_of_msg|>");
    std::mt19937 g(seed);
    std::normal_distribution<float> nd;
    const int64_t vocab = tok_->vocab_size();
    std::vector<float> logits(vocab);
    std::vector<int32_t> out;
    size_t p = 0;
    for (int s = 0; s < steps; ++s) {
      for (float& v : logits) v = nd(g);
      c.mask(logits.data(), vocab);
      while (p < want.size() && !std::isfinite(logits[want[p]])) ++p;  // refused: skip it
      if (p < want.size()) logits[want[p]] += 1000.0f;
      const int32_t pick = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      EXPECT_TRUE(std::isfinite(logits[pick])) << "no token allowed at step " << s;
      c.accept(pick);
      out.push_back(pick);
      if (p < want.size() && pick == want[p]) ++p;
      if (pick == end) break;
    }
    return out;
  }
  ParsedChatMessage parse(const std::vector<int32_t>& ids, bool thinking) {
    ChatParserOptions po;
    po.thinking = thinking;
    po.parse_tools = true;
    po.id_seed = 1;
    ChatOutputParser parser(po, tok_);
    for (int32_t t : ids) parser.feed_token(t);
    return parser.finish();
  }
  std::vector<int32_t> stops() const { return {tok_->require_special("<|end_of_msg|>")}; }

};

const std::string kCall =
    "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|>";

TEST_F(ToolConstraintTest, NamedFunctionIsCalledOnce) {
  ChatToolConstraint c(index_, *tok_, true, stops(), {"get_weather"}, true);
  // The script tries to end early, to write text in the response channel, and to call a second
  // tool: all are refused (a required call is the whole answer: content stays null).
  const std::vector<int32_t> ids =
      drive(c, "Weather.<|end_of_msg|><|close|>think<|sep|><|open|>response<|sep|>Sure.<|close|>response<|sep|>"
               "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>" + kCall +
               "<|open|>call tool=\"other\"<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>",
            400);
  const ParsedChatMessage m = parse(ids, true);
  EXPECT_FALSE(m.degraded) << tok_->decode(ids);
  ASSERT_EQ(m.tool_calls.size(), 1u) << tok_->decode(ids);
  EXPECT_EQ(m.tool_calls[0].name, "get_weather");
  EXPECT_EQ(m.tool_calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(m.reasoning_content.value_or(""), "Weather.");
  EXPECT_FALSE(m.content.has_value()) << *m.content;
}

TEST_F(ToolConstraintTest, RequiredAllowsSeveralCallsOfKnownTools) {
  ChatToolConstraint c(index_, *tok_, false, stops(), {"get_weather", "web_search"}, false);
  const std::vector<int32_t> ids = drive(
      c, "<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"web_search\" index=\"1\"<|sep|>" + kCall +
             "<|open|>call tool=\"get_weather\" index=\"2\"<|sep|>" + kCall +
             "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>",
      400);
  const ParsedChatMessage m = parse(ids, false);
  EXPECT_FALSE(m.degraded) << tok_->decode(ids);
  ASSERT_EQ(m.tool_calls.size(), 2u) << tok_->decode(ids);
  EXPECT_EQ(m.tool_calls[0].name, "web_search");
  EXPECT_EQ(m.tool_calls[1].name, "get_weather");
}

TEST_F(ToolConstraintTest, AnUnknownToolNameIsNotWritten) {
  ChatToolConstraint c(index_, *tok_, false, stops(), {"get_weather", "web_search"}, false);
  const std::string text = tok_->decode(drive(c, "<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"nope\"", 40));
  EXPECT_EQ(text.find("tool=\"nope"), std::string::npos) << text;
  EXPECT_TRUE(text.find("call tool=\"get_weather\" index=\"1\"<|sep|>") != std::string::npos ||
              text.find("call tool=\"web_search\" index=\"1\"<|sep|>") != std::string::npos)
      << text;
}

// The response channel is closed at once, empty, and the message goes on into the call; a tool
// without parameters gets well-formed argument blocks, so the parser reads the call back.
TEST_F(ToolConstraintTest, AMessageWithoutACallIsNotAllowed) {
  ChatToolConstraint c(index_, *tok_, false, stops(), {"get_weather"}, true);
  const std::vector<int32_t> ids = drive(c, "Just text.<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>", 200);
  const std::string text = tok_->decode(ids);
  EXPECT_EQ(text.rfind("<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>", 0),
            0u)
      << text;
  if (ids.back() == tok_->require_special("<|end_of_msg|>")) {
    const ParsedChatMessage m = parse(ids, false);
    EXPECT_FALSE(m.degraded) << text;
    ASSERT_EQ(m.tool_calls.size(), 1u) << text;
    EXPECT_FALSE(m.content.has_value()) << text;
  }
}

using nlohmann::json;

std::shared_ptr<const CompiledSchema> compiled(const json& schema) {
  return std::make_shared<const CompiledSchema>(CompiledSchema::compile(schema));
}

const json kWeather = json::parse(R"({
  "type": "object",
  "properties": {
    "city": {"type": "string"},
    "days": {"type": "integer"},
    "unit": {"enum": ["celsius", "fahrenheit"]}
  },
  "required": ["city", "days"],
  "additionalProperties": false
})");

TEST_F(ToolConstraintTest, ArgumentsFollowTheToolsSchema) {
  ChatToolConstraint c(index_, *tok_, false, stops(), {ForcedTool("get_weather", compiled(kWeather))}, true);
  // Refused on the way: closing the call before the required arguments, an unknown key, the
  // type "string" for an integer, a word where the integer goes, a unit outside the enum.
  const std::vector<int32_t> ids = drive(
      c, "<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
         "<|close|>call<|sep|>"
         "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|>"
         "<|open|>argument key=\"days\" type=\"number\"<|sep|>three 3<|close|>argument<|sep|>"
         "<|open|>argument key=\"unit\" type=\"string\"<|sep|>kelvin celsius<|close|>argument<|sep|>"
         "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>",
      400);
  const ParsedChatMessage m = parse(ids, false);
  EXPECT_FALSE(m.degraded) << tok_->decode(ids);
  ASSERT_EQ(m.tool_calls.size(), 1u) << tok_->decode(ids);
  EXPECT_EQ(m.tool_calls[0].arguments, "{\"city\": \"Paris\", \"days\": 3, \"unit\": \"celsius\"}")
      << tok_->decode(ids);
}

// A "model" that is noise plus a bonus on the K3 structure and on the bytes that close JSON
// strings and containers, so random messages finish: whatever it picks inside the mask, every
// finished call's arguments satisfy the tool's schema.
TEST_F(ToolConstraintTest, RandomCallsAlwaysSatisfyTheirSchemas) {
  const json schemas[] = {
      kWeather,
      json::parse(R"({"type": "object", "properties": {
        "q": {"type": "string"}, "n": {"type": ["integer", "null"]}, "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "minItems": 1, "maxItems": 2},
        "filter": {"type": "object", "properties": {"lo": {"type": "number"}, "hi": {"type": "number"}},
                   "required": ["lo"], "additionalProperties": false},
        "any": {}, "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "mode": {"anyOf": [{"enum": ["fast", "slow"]}, {"type": "null"}, {"type": "array", "maxItems": 1}]}},
        "required": ["q", "filter", "mode"]})"),
      json::parse(R"({"type": "object", "properties": {}})"),
      json::parse(R"({"type": "object", "properties": {"tree": {"$ref": "#/$defs/t"}}, "required": ["tree"],
        "$defs": {"t": {"type": "object", "properties": {"v": {"type": "integer"},
                                                         "kids": {"type": "array", "items": {"$ref": "#/$defs/t"}}},
                        "required": ["v"]}}})"),
  };
  const int32_t open = tok_->require_special("<|open|>"), close = tok_->require_special("<|close|>");
  const int32_t end = tok_->require_special("<|end_of_msg|>");
  const int64_t vocab = tok_->vocab_size();
  std::vector<float> bonus(static_cast<size_t>(vocab), 0.0f);
  for (int32_t id = 0; id < vocab; ++id) {
    if (id == open || id == close) bonus[static_cast<size_t>(id)] = 3.0f;
    if (tok_->is_special(id)) continue;
    const std::string b(tok_->token_bytes(id));
    if (b.find_first_of("\"}]") != std::string::npos) bonus[static_cast<size_t>(id)] = 2.5f;
  }
  int finished = 0, calls = 0;
  for (size_t k = 0; k < std::size(schemas); ++k) {
    for (uint32_t seed = 1; seed <= 25; ++seed) {
      ChatToolConstraint c(index_, *tok_, false, stops(), {ForcedTool("t", compiled(schemas[k]))}, false);
      std::mt19937 g(seed * 7919 + static_cast<uint32_t>(k));
      std::normal_distribution<float> nd;
      std::vector<float> logits(static_cast<size_t>(vocab));
      std::vector<int32_t> ids;
      for (int s = 0; s < 600 && (ids.empty() || ids.back() != end); ++s) {
        for (int64_t i = 0; i < vocab; ++i) logits[static_cast<size_t>(i)] = nd(g) + bonus[static_cast<size_t>(i)];
        c.mask(logits.data(), vocab);
        const int32_t pick = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        ASSERT_TRUE(std::isfinite(logits[static_cast<size_t>(pick)])) << "schema " << k << " seed " << seed;
        c.accept(pick);
        ids.push_back(pick);
      }
      if (ids.back() != end) continue;
      ++finished;
      const ParsedChatMessage m = parse(ids, false);
      EXPECT_FALSE(m.degraded) << tok_->decode(ids);
      ASSERT_FALSE(m.tool_calls.empty()) << tok_->decode(ids);
      for (const ParsedToolCall& call : m.tool_calls) {
        ++calls;
        const json args = json::parse(call.arguments);
        EXPECT_TRUE(testing::satisfies(args, schemas[k], schemas[k]))
            << "schema " << k << ": " << call.arguments << "\n" << tok_->decode(ids);
      }
    }
  }
  // Most random messages finish within the step budget (the test would prove nothing otherwise).
  EXPECT_GE(finished, 60) << calls << " calls";
}

// A "model" that never closes anything on its own: noise, with <|close|> far below every other
// token wherever the mask leaves a choice (the random model of the server tests does the same in
// effect).  Returns the generated ids, at most `budget` of them, ending at <|end_of_msg|> if
// the message ended.
std::vector<int32_t> never_closing(TokenConstraint& c, const Tokenizer& tok, int64_t budget, uint32_t seed) {
  const int32_t close = tok.require_special("<|close|>"), end = tok.require_special("<|end_of_msg|>");
  const int64_t vocab = tok.vocab_size();
  std::mt19937 g(seed);
  std::normal_distribution<float> nd;
  std::vector<float> logits(static_cast<size_t>(vocab));
  std::vector<int32_t> ids;
  while (static_cast<int64_t>(ids.size()) < budget && (ids.empty() || ids.back() != end)) {
    for (float& v : logits) v = nd(g);
    logits[static_cast<size_t>(close)] = -1e4f;
    c.mask(logits.data(), vocab);
    const int32_t pick = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_TRUE(std::isfinite(logits[static_cast<size_t>(pick)])) << "no token allowed at step " << ids.size();
    c.accept(pick);
    ids.push_back(pick);
  }
  return ids;
}

// A model that never closes its reasoning nor a value: with a token budget, the constraint closes
// the reasoning after at most half of it and every value on the shortest way, so the call comes,
// well formed and satisfying the schema, within the budget (without one the reasoning never ends).
TEST_F(ToolConstraintTest, ABudgetEndsReasoningAndValuesThatNeverClose) {
  const int32_t close = tok_->require_special("<|close|>"), end = tok_->require_special("<|end_of_msg|>");
  for (int64_t budget : {150, 250, 400}) {
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      SCOPED_TRACE(::testing::Message() << "budget " << budget << " seed " << seed);
      ChatToolConstraint c(index_, *tok_, true, stops(), {ForcedTool("get_weather", compiled(kWeather))}, true, budget);
      const std::vector<int32_t> ids = never_closing(c, *tok_, budget, seed);
      ASSERT_EQ(ids.back(), end) << tok_->decode(ids);
      const int64_t reasoning = std::find(ids.begin(), ids.end(), close) - ids.begin();
      EXPECT_LE(reasoning, budget / 2);
      EXPECT_GT(reasoning, 0);
      const ParsedChatMessage m = parse(ids, true);
      EXPECT_FALSE(m.degraded) << tok_->decode(ids);
      EXPECT_TRUE(m.reasoning_content.has_value());
      EXPECT_FALSE(m.content.has_value()) << *m.content;
      ASSERT_EQ(m.tool_calls.size(), 1u) << tok_->decode(ids);
      EXPECT_TRUE(testing::satisfies(json::parse(m.tool_calls[0].arguments), kWeather, kWeather))
          << m.tool_calls[0].arguments;
    }
  }
  // No budget: the reasoning goes on for as long as the model keeps writing.
  ChatToolConstraint open(index_, *tok_, true, stops(), {ForcedTool("get_weather", compiled(kWeather))}, true);
  const std::vector<int32_t> ids = never_closing(open, *tok_, 300, 1);
  EXPECT_EQ(std::find(ids.begin(), ids.end(), close), ids.end());
}

// Every budget, from one token up: the reply never runs past it; once it is large enough the
// message ends with the call (several tools, several calls allowed, a tool without parameters);
// below that it is cut, and what the parser reads from the cut reply is reasoning only -- no
// content, no call, never the call's markup.
TEST_F(ToolConstraintTest, EveryBudgetEndsWithACallOrACutWithoutMarkup) {
  const int32_t end = tok_->require_special("<|end_of_msg|>");
  const std::vector<ForcedTool> tools = {ForcedTool("get_weather", compiled(kWeather)), ForcedTool("ping")};
  int64_t first_whole = -1;
  for (bool thinking : {true, false}) {
    for (int64_t budget = 1; budget <= 200; ++budget) {
      SCOPED_TRACE(::testing::Message() << "thinking " << thinking << " budget " << budget);
      ChatToolConstraint c(index_, *tok_, thinking, stops(), tools, false, budget);
      const std::vector<int32_t> ids = never_closing(c, *tok_, budget, static_cast<uint32_t>(budget));
      ASSERT_LE(static_cast<int64_t>(ids.size()), budget);
      const ParsedChatMessage m = parse(ids, thinking);
      EXPECT_FALSE(m.content.has_value()) << *m.content << "\n" << tok_->decode(ids);
      if (ids.back() == end) {
        if (thinking && first_whole < 0) first_whole = budget;
        EXPECT_FALSE(m.degraded) << tok_->decode(ids);
        ASSERT_FALSE(m.tool_calls.empty()) << tok_->decode(ids);
        for (const ParsedToolCall& call : m.tool_calls) {
          if (call.name == "get_weather") {
            EXPECT_TRUE(testing::satisfies(json::parse(call.arguments), kWeather, kWeather)) << call.arguments;
          }
        }
      }
    }
  }
  // The smallest budgets are too small for a call; the rest all end with one.
  EXPECT_GT(first_whole, 1);
  EXPECT_LT(first_whole, 120);
}

// response_format under the same budget: the reasoning is closed, and the JSON (whose strings the
// model would never close) is finished, within the budget.
TEST(JsonConstraintBudget, ABudgetEndsReasoningAndJsonThatNeverClose) {
  const Tokenizer& tok = testing::SynthVocab::get().tok;
  const int32_t close = tok.require_special("<|close|>"), end = tok.require_special("<|end_of_msg|>");
  for (int64_t budget : {60, 200, 400}) {
    for (uint32_t seed = 1; seed <= 5; ++seed) {
      SCOPED_TRACE(::testing::Message() << "budget " << budget << " seed " << seed);
      ChatJsonConstraint c(testing::SynthVocab::get().index, tok, true, {end}, compiled(kWeather), budget);
      const std::vector<int32_t> ids = never_closing(c, tok, budget, seed);
      ASSERT_EQ(ids.back(), end) << tok.decode(ids);
      EXPECT_LE(std::find(ids.begin(), ids.end(), close) - ids.begin(), budget / 2);
      ChatParserOptions po;
      ChatOutputParser parser(po, &tok);
      for (int32_t t : ids) parser.feed_token(t);
      const ParsedChatMessage m = parser.finish();
      EXPECT_TRUE(m.stopped) << tok.decode(ids);
      ASSERT_TRUE(m.content.has_value()) << tok.decode(ids);
      EXPECT_TRUE(testing::satisfies(json::parse(*m.content), kWeather, kWeather)) << *m.content;
    }
  }
}

}  // namespace
}  // namespace k3
