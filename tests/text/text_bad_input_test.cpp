// Hostile or malformed inputs to the text layer: each is refused with an error that names what is
// wrong (or, for model output, degrades), never a crash, a hang or silently changed data.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"
#include "text/bpe_ranks.h"
#include "text/json_schema.h"
#include "text/py_json.h"
#include "text/special_tokens.h"
#include "text/tokenizer.h"
#include "text/xtml_renderer.h"
#include "text_test_util.h"

namespace k3 {
namespace {

using testing::error_of;

bool accepts(const CompiledSchema& c, const std::string& text) {
  SchemaValidator v(&c);
  return v.feed(text) && v.complete();
}

TEST(TextBadInput, SchemaRefCycleWithoutASchemaIsRefused) {
  // The cycle returned a node index past the end of the node list (read out of bounds).
  for (const char* schema : {
           R"({"type":"object","properties":{"a":{"$ref":"#/$defs/a"}},"$defs":{"a":{"$ref":"#/$defs/a"}}})",
           R"({"type":"object","properties":{"a":{"$ref":"#/$defs/a"}},
               "$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}}})",
           R"({"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/a"}}})"}) {
    const std::string msg = error_of([&] { CompiledSchema::compile(ojson::parse(schema)); });
    EXPECT_NE(msg.find("cycle of $refs that never reaches a schema"), std::string::npos) << msg;
  }
  // An alias to a real schema is fine.
  const CompiledSchema c = CompiledSchema::compile(ojson::parse(
      R"({"type":"object","properties":{"a":{"$ref":"#/$defs/a"}},"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"type":"string"}}})"));
  EXPECT_TRUE(accepts(c, R"({"a":"x"})"));
  EXPECT_FALSE(accepts(c, R"({"a":1})"));
}

TEST(TextBadInput, SchemaRefChainsAreBoundedNotAStackOverflow) {
  // Definitions that are each only a $ref to the next: compile() recursed once per hop.
  ojson schema = {{"type", "object"}, {"properties", {{"a", {{"$ref", "#/$defs/d0"}}}}}};
  ojson defs = ojson::object();
  const int n = 1000;  // (100,000 overflowed the stack)
  for (int i = 0; i < n; ++i) defs[cat("d", i)] = {{"$ref", cat("#/$defs/d", i + 1)}};
  defs[cat("d", n)] = {{"type", "string"}};
  schema["$defs"] = defs;
  std::string msg = error_of([&] { CompiledSchema::compile(schema); });
  EXPECT_NE(msg.find("nests more than 256 levels deep"), std::string::npos) << msg;

  // anyOf alternatives chained through $ref, each definition compiled shallowly (b_j is first
  // reached from property p_j, and its alternative b_{j-1} already exists), and the chain first
  // resolved from its end (the second alternative of "a"): resolve() recursed once per link.
  ojson groups = ojson::object();
  ojson bdefs = {{"b0", {{"type", "string"}}}};
  for (int g = 0; g < 5; ++g) {
    ojson props = ojson::object();
    for (int k = 0; k < 64; ++k) {
      const int j = g * 64 + k + 1;
      props[cat("p", j)] = {{"$ref", cat("#/$defs/b", j)}};
      bdefs[cat("b", j)] = {{"anyOf", ojson::array({{{"$ref", cat("#/$defs/b", j - 1)}}})}};
    }
    groups[cat("g", g)] = {{"type", "object"}, {"properties", props}};
  }
  const ojson alts = ojson::array({{{"type", "object"}, {"properties", groups}}, {{"$ref", "#/$defs/b320"}}});
  const ojson chained = {{"type", "object"}, {"properties", {{"a", {{"anyOf", alts}}}}}, {"$defs", bdefs}};
  msg = error_of([&] { CompiledSchema::compile(chained); });
  EXPECT_NE(msg.find("chains alternatives (through $ref) more than 256 levels deep"), std::string::npos) << msg;
}

TEST(TextBadInput, SchemaWithManyNodesKeepsTheirIndices) {
  // 64 x 64 x 8 properties: nodes past 32767 were stored in 16 bits and read back negative.
  ojson top = ojson::object();
  for (int p = 0; p < 64; ++p) {
    ojson qs = ojson::object();
    for (int q = 0; q < 64; ++q) {
      ojson rs = ojson::object();
      for (int r = 0; r < 8; ++r) rs[cat("r", r)] = {{"type", "string"}};
      qs[cat("q", q)] = {{"type", "object"}, {"properties", rs}};
    }
    top[cat("p", p)] = {{"type", "object"}, {"properties", qs}};
  }
  const CompiledSchema c = CompiledSchema::compile({{"type", "object"}, {"properties", top}});
  EXPECT_TRUE(accepts(c, R"({"p63":{"q63":{"r7":"x"}}})"));
  EXPECT_FALSE(accepts(c, R"({"p63":{"q63":{"r7":1}}})"));
  EXPECT_FALSE(accepts(c, R"({"p63":{"q63":{"r8":"x"}}})"));
}

TEST(TextBadInput, SchemaLongPropertyNamesAndConstValues) {
  // The position inside a property name or an enum value was 16 bits: past 65,535 bytes it
  // wrapped, and the schema's own documents were refused.
  const std::string name(70000, 'k'), value(70000, 'v');
  const CompiledSchema c = CompiledSchema::compile(
      {{"type", "object"}, {"properties", {{name, {{"const", value}}}}}, {"required", {name}}});
  EXPECT_TRUE(accepts(c, "{\"" + name + "\":\"" + value + "\"}"));
  EXPECT_FALSE(accepts(c, "{\"" + name + "\":\"" + value + "v\"}"));
  EXPECT_FALSE(accepts(c, "{\"" + name + "\":\"" + value.substr(1) + "\"}"));
}

TEST(TextBadInput, SchemaEnumConstAndTypeAllMustHold) {
  // const beside enum, and type beside either, were ignored (the union of the values was allowed).
  const CompiledSchema c = CompiledSchema::compile(ojson::parse(R"({"type":"object","properties":{
      "a":{"const":"x","enum":["x","y"]},
      "b":{"type":"string","enum":["s",1,null]},
      "c":{"type":"integer","enum":[1,1.0,1.5,"1"]}}})"));
  EXPECT_TRUE(accepts(c, R"({"a":"x","b":"s","c":1})"));
  EXPECT_TRUE(accepts(c, R"({"c":1.0})"));
  EXPECT_FALSE(accepts(c, R"({"a":"y"})"));
  EXPECT_FALSE(accepts(c, R"({"b":1})"));
  EXPECT_FALSE(accepts(c, R"({"b":null})"));
  EXPECT_FALSE(accepts(c, R"({"c":1.5})"));
  EXPECT_FALSE(accepts(c, R"({"c":"1"})"));
  std::string msg = error_of([] {
    CompiledSchema::compile(ojson::parse(R"({"type":"object","properties":{"a":{"const":"x","enum":["y"]}}})"));
  });
  EXPECT_NE(msg.find("const at #/properties/a is not one of the values enum lists"), std::string::npos) << msg;
  msg = error_of([] {
    CompiledSchema::compile(ojson::parse(R"({"type":"object","properties":{"a":{"type":"string","enum":[1,2]}}})"));
  });
  EXPECT_NE(msg.find("no enum / const value at #/properties/a has the type"), std::string::npos) << msg;
  // An enum beside properties keeps its values whatever they are.
  EXPECT_TRUE(accepts(CompiledSchema::compile(ojson::parse(
                          R"({"type":"object","properties":{"a":{"enum":[1,"z"],"properties":{"q":{}}}}})")),
                      R"({"a":1})"));
}

TEST(TextBadInput, TiktokenRanksFarBeyondTheTokenCountAreRefused) {
  // One token of rank 10^9 sized the rank tables for 10^9 entries (8 GB).
  const std::string msg = error_of([] { BpeRanks::parse_tiktoken("QQ== 1000000000\n", "sparse.tiktoken"); });
  EXPECT_NE(msg.find("sparse.tiktoken: rank 1000000000 leaves 1000000000 ranks unused for 1 tokens"), std::string::npos)
      << msg;
  EXPECT_THROW(BpeRanks::parse_tiktoken("QQ== 0\nQg== 65540\n", "x"), Error);
  // Gaps up to the limit are fine, and repeated ranks still say so.
  const BpeRanks r = BpeRanks::parse_tiktoken("QQ== 0\nQg== 65539\n", "x");
  EXPECT_EQ(r.end_rank(), 65540);
  EXPECT_EQ(r.rank("B"), 65539);
  const std::string dup = error_of([] { BpeRanks::parse_tiktoken("QQ== 0\nQg== 0\nQw== 0\n", "dup.tiktoken"); });
  EXPECT_NE(dup.find("rank 0 appears twice"), std::string::npos) << dup;
}

TEST(TextBadInput, SpecialTokenIdsMustBePlainDecimal) {
  // "0257" and "257" both named id 257; the later entry silently replaced the earlier one.
  testing::TempDir dir;
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  testing::write_file(dir.file("tiktoken.model"), BpeRanks(tokens).to_tiktoken());
  testing::write_file(dir.file("tokenizer_config.json"),
                      R"({"added_tokens_decoder": {"257": {"content": "[A]"}, "0257": {"content": "[B]"}}})");
  const std::string msg = error_of([&] { Tokenizer::from_model_dir(dir.path()); });
  EXPECT_NE(msg.find("added_tokens_decoder key '0257' is not written as a plain decimal token id (257)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("tokenizer_config.json"), std::string::npos) << msg;
}

TEST(TextBadInput, JsonWithANulByteIsNotJson) {
  // nlohmann's parser stops at a NUL byte: "{...}\0{...}" parsed as the first object alone.
  EXPECT_FALSE(py_json_loads(std::string("{\"a\":1}\0{\"b\":2}", 15)).has_value());
  EXPECT_FALSE(py_json_loads(std::string("5\0", 2)).has_value());
  EXPECT_TRUE(py_json_loads("{\"a\":\"\\u0000\"}").has_value());
  // A tool call's argument string with a NUL is rendered whole (as unparsed text), not cut short.
  const ojson messages = ojson::parse(
      R"([{"role":"assistant","content":"","tool_calls":[{"id":"c1","function":{"name":"f",
          "arguments":"{\"a\":1}\u0000{\"b\":2}"}}]}])");
  ChatOptions o;
  o.thinking = false;
  o.add_generation_prompt = false;
  const std::string text = segments_text(render_chat(messages, nullptr, o));
  EXPECT_NE(text.find(std::string("{\"a\":1}\0{\"b\":2}", 15)), std::string::npos) << text;
}

TEST(TextBadInput, PyJsonParseIsOjsonParseWithoutTheQuadraticKeySearch) {
  // ojson::parse searches each object's keys linearly per key (seconds for tens of thousands of
  // keys); py_json_parse builds the same value (order kept, a repeated key in its first place
  // with its last value).
  for (const char* t : {R"({"b":1,"a":[1,{"z":null,"y":2.5}],"b":{"c":"d"}})",
                        R"([1,"x",true,null,-5,18446744073709551615,1e5,[],{}])", R"("s")", "3", " {} ",
                        R"({"a":{"a":{"a":1},"a":2},"b":[{"k":1,"k":[2]}]})"})
    EXPECT_EQ(py_json_parse(t).dump(), ojson::parse(t).dump()) << t;
  for (const char* t : {"{", "[1,]", R"({"a"})", "1 2", "", "1e400", "[\"\\ud800\"]"}) {
    const std::string msg = error_of([&] { py_json_parse(t); });
    EXPECT_NE(msg.find("[json.exception."), std::string::npos) << t << ": " << msg;
  }
  const std::string nul = error_of([] { py_json_parse(std::string("[1, 2]\0[3]", 10)); });
  EXPECT_NE(nul.find("contains a NUL byte at offset 6"), std::string::npos) << nul;
  std::string big = "{";
  for (int i = 0; i < 200000; ++i) big += cat("\"k", i % 150000, "\":", i, ",");
  big.back() = '}';
  const ojson v = py_json_parse(big);
  ASSERT_EQ(v.size(), 150000u);
  EXPECT_EQ(v.begin().key(), "k0");
  EXPECT_EQ(v["k0"], 150000);
  EXPECT_EQ(v["k149999"], 149999);
}

// The search for special tokens hashed every distinct text length at every position: a
// tokenizer_config.json of many long texts sharing a first byte made encoding a long prompt take
// minutes.  It walks a trie now, and texts are at most kMaxTextBytes long.
TEST(TextBadInput, SpecialTokenSearchIsBoundedAndKeepsLongestEarliest) {
  std::vector<SpecialToken> hostile;
  for (int len = 56; len < 256; ++len) hostile.push_back({std::string(static_cast<size_t>(len - 1), 'a') + "b", 1000 + len});
  const SpecialTokens h(hostile, "cfg");
  const std::string text(200000, 'a');
  EXPECT_FALSE(h.find(text, 0).has_value());
  const std::optional<SpecialMatch> m = h.find(text + std::string(99, 'a') + "b", 0);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->pos, 200100u - 255u);  // the earliest start: the 255-byte text ending at the "b"
  EXPECT_EQ(m->len, 255u);
  EXPECT_EQ(m->id, 1255);

  const SpecialTokens s({{"<|a|>", 7}, {"<|a|>x", 8}, {"<|b", 9}, {"[x]", 10}}, "cfg");
  auto at = [&](const std::string& t, size_t from) {
    const std::optional<SpecialMatch> r = s.find(t, from);
    return r ? cat(r->pos, ":", r->len, ":", r->id) : std::string("none");
  };
  EXPECT_EQ(at("zz<|a|>x", 0), "2:6:8");  // longest at the earliest position
  EXPECT_EQ(at("zz<|a|>y", 0), "2:5:7");
  EXPECT_EQ(at("<|a<|b", 0), "3:3:9");    // a failed walk does not skip the next start
  EXPECT_EQ(at("[x]<|a|>", 1), "3:5:7");
  EXPECT_EQ(at("<|a|", 0), "none");
  EXPECT_EQ(at("", 0), "none");

  const std::string msg = error_of([] { SpecialTokens({{std::string(257, 'x'), 5}}, "cfg"); });
  EXPECT_NE(msg.find("cfg: special token 5 is 257 bytes long; at most 256 are supported"), std::string::npos) << msg;
}

}  // namespace
}  // namespace k3
