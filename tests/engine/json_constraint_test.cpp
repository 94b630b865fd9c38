// ChatJsonConstraint on a synthetic K3 tokenizer, driven by random logits (with biases that make
// objects close in reasonable time): every masked step leaves a token, the response is a JSON
// object by nlohmann's parser, the forced K3 frame around it is exact, and the chat output
// parser reads the result back as {reasoning, content = the object}.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "base/error.h"
#include "engine/json_constraint.h"
#include "synth_vocab.h"
#include "text/chat_output_parser.h"
#include "text/tokenizer.h"

namespace k3 {
namespace {

class JsonConstraintTest : public ::testing::Test {
 protected:
  const Tokenizer* tok_ = &testing::SynthVocab::get().tok;
  std::shared_ptr<const VocabIndex> index_ = testing::SynthVocab::get().index;

  // Runs the constraint for up to `steps` tokens from random logits; biases favour tokens whose
  // bytes contain these characters.  Returns the tokens, stopping after <|end_of_msg|>.
  std::vector<int32_t> run(bool thinking, uint32_t seed, int steps, int close_after = 5,
                           std::shared_ptr<const CompiledSchema> schema = nullptr) {
    const int32_t end = tok_->require_special("<|end_of_msg|>"), close = tok_->require_special("<|close|>");
    ChatJsonConstraint c(index_, *tok_, thinking, {end}, schema);
    std::mt19937 g(seed);
    std::normal_distribution<float> nd;
    const int64_t vocab = tok_->vocab_size();
    std::vector<float> logits(vocab);
    std::vector<int32_t> out;
    for (int s = 0; s < steps; ++s) {
      for (int64_t t = 0; t < vocab; ++t) {
        logits[t] = nd(g);
        if (tok_->is_special(t)) {
          if (t == close && s >= close_after) logits[t] += 8.0f;  // end the reasoning after a while
          continue;
        }
        const std::string_view b = tok_->token_bytes(static_cast<int32_t>(t));
        if (b.find('}') != std::string_view::npos) logits[t] += 3.0f;
        if (b.find('"') != std::string_view::npos) logits[t] += 2.0f;
      }
      c.mask(logits.data(), vocab);
      const int32_t pick = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      EXPECT_TRUE(std::isfinite(logits[pick])) << "no token allowed at step " << s;
      c.accept(pick);
      out.push_back(pick);
      if (pick == end) break;
    }
    return out;
  }

};

const std::string kClose = "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>";

TEST_F(JsonConstraintTest, ResponsesAreJsonObjectsInTheK3Frame) {
  int finished = 0;
  for (uint32_t seed = 0; seed < 40; ++seed) {
    for (bool thinking : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "seed " << seed << " thinking " << thinking);
      const std::vector<int32_t> ids = run(thinking, seed, 400);
      const std::string text = tok_->decode_bytes(ids);
      std::string body = text;
      if (thinking) {
        const std::string open = "<|close|>think<|sep|><|open|>response<|sep|>";
        const size_t at = text.find(open);
        ASSERT_NE(at, std::string::npos) << text;
        body = text.substr(at + open.size());
      }
      if (ids.back() != tok_->require_special("<|end_of_msg|>")) {  // cut by the step limit: a valid prefix
        JsonValidator v(true);
        EXPECT_TRUE(v.feed(body)) << body;
        continue;
      }
      ++finished;
      ASSERT_GE(body.size(), kClose.size());
      ASSERT_EQ(body.substr(body.size() - kClose.size()), kClose) << body;
      const std::string json = body.substr(0, body.size() - kClose.size());
      ASSERT_TRUE(nlohmann::json::accept(json)) << json;
      EXPECT_TRUE(nlohmann::json::parse(json).is_object()) << json;
      ChatParserOptions po;
      po.thinking = thinking;
      ChatOutputParser parser(po, tok_);
      for (int32_t t : ids) parser.feed_token(t);
      const ParsedChatMessage m = parser.finish();
      ASSERT_TRUE(m.content.has_value());
      EXPECT_EQ(*m.content, json);
      EXPECT_FALSE(m.degraded) << text;
      EXPECT_TRUE(m.stopped);
      EXPECT_EQ(m.reasoning_content.has_value(), thinking && text.find("<|close|>think") > 0);
    }
  }
  EXPECT_GE(finished, 40) << "the biases should close most objects within 400 tokens";
}

// With a schema the object is exactly what the schema allows, whatever the logits say.
TEST_F(JsonConstraintTest, SchemaShapesTheObject) {
  const auto schema = std::make_shared<const CompiledSchema>(CompiledSchema::compile(nlohmann::json::parse(R"({
    "type": "object", "required": ["colour", "count"],
    "properties": {"colour": {"enum": ["red", "green"]}, "count": {"type": "integer"},
                   "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}}})")));
  int finished = 0;
  for (uint32_t seed = 0; seed < 30; ++seed) {
    const std::vector<int32_t> ids = run(false, seed, 300, 5, schema);
    const std::string text = tok_->decode_bytes(ids);
    if (ids.back() != tok_->require_special("<|end_of_msg|>")) continue;
    ++finished;
    ASSERT_EQ(text.substr(text.size() - kClose.size()), kClose) << text;
    const nlohmann::json v = nlohmann::json::parse(text.substr(0, text.size() - kClose.size()));
    ASSERT_TRUE(v.is_object()) << v;
    EXPECT_TRUE(v["colour"] == "red" || v["colour"] == "green") << v;
    EXPECT_TRUE(v["count"].is_number_integer()) << v;
    for (const auto& [k, x] : v.items()) EXPECT_TRUE(k == "colour" || k == "count" || k == "tags") << v;
    if (v.contains("tags")) {
      EXPECT_LE(v["tags"].size(), 2u) << v;
      for (const auto& t : v["tags"]) EXPECT_TRUE(t.is_boolean()) << v;
    }
  }
  EXPECT_GE(finished, 15);
}

TEST_F(JsonConstraintTest, ForcedTextAcceptsAnySpelling) {
  const std::vector<int32_t> r = index_->prefixes_of("response");
  ASSERT_FALSE(r.empty());
  for (int32_t id : r) EXPECT_EQ(std::string("response").rfind(std::string(tok_->token_bytes(id)), 0), 0u);
  // "r" alone is always there (single bytes are tokens).
  EXPECT_NE(std::find(r.begin(), r.end(), tok_->encode("r").at(0)), r.end());
  EXPECT_TRUE(index_->prefixes_of("").empty());
  // A long text (a forced 1 MB tool name): the same tokens as its short head, the walk ending
  // where no token goes on.
  const std::string head = "response";
  EXPECT_EQ(index_->prefixes_of(head + std::string(1 << 20, 'q')), index_->prefixes_of(head + "q"));
  EXPECT_FALSE(index_->prefixes_of(head).empty());
}

// A schema whose values cannot all finish: the decoder would walk into the value and then find no
// token (the request failed with a 500 after generating).  Refused up front, naming the path.
TEST(CheckSchemaDecodable, RefusesValuesThatCannotFinish) {
  const auto error_of = [](const std::string& text) {
    try {
      check_schema_decodable(CompiledSchema::compile(nlohmann::json::parse(text)));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const auto nested = [](int levels) {
    std::string s = R"({"type":"object"})";
    for (int i = 1; i < levels; ++i) s = R"({"type":"object","properties":{"k":)" + s + R"(},"required":["k"]})";
    return s;
  };
  // Required recursion: every object needs another inside it.
  std::string msg = error_of(R"({"type":"object","properties":{"a":{"$ref":"#/$defs/A"}},"required":["a"],
      "$defs":{"A":{"type":"object","properties":{"b":{"$ref":"#/$defs/A"}},"required":["b"]}}})");
  EXPECT_NE(msg.find("no value the decoder can produce satisfies the schema at #"), std::string::npos) << msg;
  // The same through minItems, and through an optional property (the decoder may pick it).
  msg = error_of(R"({"type":"object","properties":{"a":{"$ref":"#/$defs/A"}},
      "$defs":{"A":{"type":"array","minItems":1,"items":{"$ref":"#/$defs/A"}}}})");
  EXPECT_NE(msg.find("at #/properties/a"), std::string::npos) << msg;
  msg = error_of(R"({"type":"object","properties":{"x":{"type":"integer"},"a":{"anyOf":[{"type":"null"},
      {"type":"object","properties":{"b":{"$ref":"#/$defs/A"}},"required":["b"]}]}},
      "$defs":{"A":{"type":"object","properties":{"c":{"$ref":"#/$defs/A"}},"required":["c"]}}})");
  EXPECT_NE(msg.find("at #/properties/a/anyOf/1"), std::string::npos) << msg;
  // Deeper than the recogniser's frames.
  EXPECT_NE(error_of(nested(SchemaValidator::kMaxFrames + 1)).find("nested"), std::string::npos);
  // What can finish passes: kMaxFrames levels, optional or nullable recursion, minItems 0.
  EXPECT_EQ(error_of(nested(SchemaValidator::kMaxFrames)), "");
  EXPECT_EQ(error_of(R"({"type":"object","properties":{"v":{"type":"integer"},"next":{"$ref":"#/$defs/N"}},
      "required":["v"],"$defs":{"N":{"type":"object","properties":{"v":{"type":"integer"},
      "next":{"$ref":"#/$defs/N"}},"required":["v"]}}})"), "");
  EXPECT_EQ(error_of(R"({"type":"object","properties":{"t":{"$ref":"#/$defs/T"}},"required":["t"],
      "$defs":{"T":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/T"}},
      "up":{"anyOf":[{"$ref":"#/$defs/T"},{"type":"null"}]}},"required":["kids","up"]}}})"), "");
  EXPECT_EQ(error_of(R"({"type":"object","properties":{"a":{"type":"array","maxItems":0,"items":{"$ref":"#/$defs/A"}}},
      "$defs":{"A":{"type":"object","properties":{"b":{"$ref":"#/$defs/A"}},"required":["b"]}}})"), "");
}

}  // namespace
}  // namespace k3
