// ChatToolConstraint on a synthetic K3 tokenizer: a scripted "model" (noise plus a large bonus
// on the next token of a script) is driven through the mask; the script's forbidden moves (an
// early end, a tool that does not exist, a message without a call) are refused, and the chat
// output parser reads the result back with the forced calls.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/json_constraint.h"
#include "engine/tool_constraint.h"
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
  // The script tries to end early, and to call a second tool: both are refused.
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
  EXPECT_EQ(m.content.value_or(""), "Sure.");
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

TEST_F(ToolConstraintTest, AMessageWithoutACallIsNotAllowed) {
  ChatToolConstraint c(index_, *tok_, false, stops(), {"get_weather"}, true);
  const std::vector<int32_t> ids = drive(c, "Just text.<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>", 60);
  const std::string text = tok_->decode(ids);
  EXPECT_NE(text.find("<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"),
            std::string::npos)
      << text;
  EXPECT_NE(ids.back(), tok_->require_special("<|end_of_msg|>"));
}

}  // namespace
}  // namespace k3
