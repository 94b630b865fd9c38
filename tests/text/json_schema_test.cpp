// SchemaValidator against a plain recursive check of the same schema subset on nlohmann's parse
// (written here, independent of the incremental recogniser), on documents generated from the
// schema and on mutated ones; every prefix of an accepted document is accepted; compile()
// refuses what it does not support, naming it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>

#include "base/error.h"
#include "support/json_schema_reference.h"
#include "text/json_schema.h"

namespace k3 {
namespace {

using json = nlohmann::json;

const json kSchema = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "score": {"type": "number"},
    "ok": {"type": "boolean"},
    "tag": {"enum": ["red", "green", 7, null]},
    "note": {"type": ["string", "null"]},
    "extra": {},
    "items": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
    "tree": {"$ref": "#/$defs/node"},
    "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
    "either": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
                         {"$ref": "#/$defs/node"}, {"enum": [true, 5]}]}
  },
  "required": ["name", "age"],
  "additionalProperties": false,
  "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                                                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                      "required": ["v"]}}
})");

using testing::satisfies;

bool accepts(const CompiledSchema& c, const std::string& text) {
  SchemaValidator v(&c);
  return v.feed(text) && v.complete();
}

// A document for schema s (mostly valid; `wild` picks random types and keys now and then).
std::string generate(const json& s, const json& root, std::mt19937& g, int depth, bool wild) {
  const auto ws = [&] { return std::string(g() % 2, " \n"[g() % 2]); };
  const auto any_scalar = [&]() -> std::string {
    static const char* xs[] = {"1", "-2.5", "\"s\"", "true", "null", "[]", "{}", "3e2", "\"red\"", "7"};
    return xs[g() % 10];
  };
  if (wild && g() % 8 == 0) return any_scalar();
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"];
    return generate(root["$defs"][ref.substr(8)], root, g, depth, wild);
  }
  if (s.contains("enum")) return s["enum"][g() % s["enum"].size()].dump();
  for (const char* k : {"anyOf", "oneOf"})
    if (s.contains(k)) return generate(s[k][g() % s[k].size()], root, g, depth, wild);
  std::string type = "any";
  if (s.contains("type")) type = s["type"].is_string() ? s["type"].get<std::string>() : s["type"][g() % s["type"].size()].get<std::string>();
  if (type == "object" && depth > 0) {
    std::vector<std::string> keys;
    for (const auto& [k, x] : s["properties"].items())
      if (g() % 2 || (s.contains("required") && std::find(s["required"].begin(), s["required"].end(), k) != s["required"].end()))
        keys.push_back(k);
    std::shuffle(keys.begin(), keys.end(), g);
    if (wild && g() % 6 == 0) keys.push_back("bogus");
    std::string out = "{" + ws();
    for (size_t i = 0; i < keys.size(); ++i) {
      const json& sub = s["properties"].contains(keys[i]) ? s["properties"][keys[i]] : json::object();
      out += (i ? "," + ws() : "") + json(keys[i]).dump() + ws() + ":" + ws() + generate(sub, root, g, depth - 1, wild);
    }
    return out + ws() + "}";
  }
  if (type == "object") return "{}";
  if (type == "array" && depth > 0) {
    const size_t lo = s.value("minItems", 0), hi = std::min<size_t>(s.value("maxItems", 4), 4);
    size_t n = lo + g() % (hi - lo + 1);
    if (wild && g() % 6 == 0) n = g() % 6;
    std::string out = "[" + ws();
    for (size_t i = 0; i < n; ++i) out += (i ? "," + ws() : "") + generate(s.value("items", json::object()), root, g, depth - 1, wild);
    return out + "]";
  }
  if (type == "string") return json(std::string("t") + std::to_string(g() % 100)).dump();
  if (type == "integer") return std::to_string(static_cast<int>(g() % 2000) - 1000);
  if (type == "number") return g() % 2 ? "1.5e3" : "-0.25";
  if (type == "boolean") return g() % 2 ? "true" : "false";
  if (type == "null") return "null";
  return any_scalar();
}

TEST(JsonSchema, AgreesWithARecursiveCheck) {
  const CompiledSchema c = CompiledSchema::compile(kSchema);
  std::mt19937 g(11);
  const std::string alphabet = "{}[]:,\" 0123456789-.etrufalsn";
  int good = 0, bad = 0;
  for (int i = 0; i < 6000; ++i) {
    std::string doc = generate(kSchema, kSchema, g, 4, i % 3 != 0);
    if (i % 4 == 3 && !doc.empty()) {  // one byte changed
      doc[g() % doc.size()] = alphabet[g() % alphabet.size()];
    }
    bool want = json::accept(doc);
    if (want) {
      const json v = json::parse(doc);
      want = v.is_object() && satisfies(v, kSchema, kSchema);
    }
    ASSERT_EQ(accepts(c, doc), want) << doc;
    (want ? good : bad)++;
    if (want) {
      SchemaValidator v(&c);
      for (size_t k = 0; k < doc.size(); ++k) ASSERT_TRUE(v.feed(static_cast<uint8_t>(doc[k]))) << doc << " at " << k;
    }
  }
  EXPECT_GT(good, 1500);
  EXPECT_GT(bad, 1500);
}

TEST(JsonSchema, HandPicked) {
  const CompiledSchema c = CompiledSchema::compile(kSchema);
  EXPECT_TRUE(accepts(c, R"({"name":"a","age":3})"));
  EXPECT_TRUE(accepts(c, R"({ "age": -3, "name": "a", "tag": "green", "items": [1,2,3] })"));
  EXPECT_TRUE(accepts(c, R"({"name":"a","age":3,"tree":{"v":1,"kids":[{"v":2,"kids":[]}]}})"));
  EXPECT_TRUE(accepts(c, R"({"name":"a","age":3,"extra":{"any":[1,{"x":null}]}})"));
  EXPECT_FALSE(accepts(c, R"({"name":"a"})"));                  // age is required
  EXPECT_FALSE(accepts(c, R"({"name":"a","age":3.5})"));        // integer
  EXPECT_FALSE(accepts(c, R"({"name":"a","age":3,"age":4})"));  // twice
  EXPECT_FALSE(accepts(c, R"({"name":"a","age":3,"items":[]})"));        // minItems 1
  EXPECT_FALSE(accepts(c, R"({"name":"a","age":3,"items":[1,2,3,4]})"));  // maxItems 3
  EXPECT_FALSE(accepts(c, R"({"name":"a","age":3,"tag":"blue"})"));
  EXPECT_FALSE(accepts(c, R"({"name":"a","age":3,"colour":1})"));
  EXPECT_FALSE(accepts(c, R"({"name":"a","age":3,"tree":{"kids":[]}})"));  // v is required
  EXPECT_FALSE(accepts(c, R"([1])"));
  EXPECT_TRUE(accepts(c, R"({"name":"a","age":3,"maybe":null,"either":[true]})"));
  EXPECT_TRUE(accepts(c, R"({"name":"a","age":3,"maybe":-4,"either":{"v":1}})"));
  EXPECT_TRUE(accepts(c, R"({"name":"a","age":3,"either":5})"));
  EXPECT_FALSE(accepts(c, R"({"name":"a","age":3,"maybe":"4"})"));        // neither alternative
  EXPECT_FALSE(accepts(c, R"({"name":"a","age":3,"maybe":4.5})"));        // integer
  EXPECT_FALSE(accepts(c, R"({"name":"a","age":3,"either":false})"));     // not in the enum
  EXPECT_FALSE(accepts(c, R"({"name":"a","age":3,"either":[1]})"));       // booleans only
  EXPECT_FALSE(accepts(c, R"({"name":"a","age":3,"either":{"kids":[]}})"));  // v is required
  SchemaValidator v(&c);
  EXPECT_FALSE(v.feed(R"({"na"x)"));  // no property starts so
}

TEST(JsonSchema, CompileRefusesWhatItDoesNotSupport) {
  const auto refuses = [](const char* schema, const char* needle) {
    try {
      CompiledSchema::compile(json::parse(schema));
      ADD_FAILURE() << schema;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refuses(R"({"type":"object","properties":{"a":{"type":"string","pattern":"x+"}}})", "'pattern'");
  refuses(R"({"type":"object","properties":{"a":{"allOf":[{"type":"string"}]}}})", "'allOf'");
  refuses(R"({"type":"object","properties":{"a":{"anyOf":[{"type":"string"},{"enum":["x",1]}]}}})",
          "told apart by their first byte");
  refuses(R"({"type":"object","properties":{"a":{"anyOf":[{"type":"number"},{"type":"integer"}]}}})",
          "told apart by their first byte");
  refuses(R"({"type":"object","properties":{"a":{"anyOf":[{"type":"string"}],"type":"string"}}})", "beside it");
  refuses(R"({"type":"object","properties":{"a":{"anyOf":[]}}})", "non-empty list");
  refuses(R"({"type":"object","properties":{"a":{"$ref":"#/$defs/t"}},"$defs":{"t":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/t"}]}}})",
          "contains itself");
  refuses(R"({"type":"array"})", "top-level schema must have type \"object\"");
  refuses(R"({"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}})", "names no definition");
  refuses(R"({"type":"object","properties":{"a":{"$ref":"http://x/y"}}})", "only $ref to");
  refuses(R"({"type":"object","required":["b"],"properties":{"a":{}}})", "'b'");
  refuses(R"({"type":"object","properties":{"a\"b":{}}})", "needs escaping");
  refuses(R"({"type":"object","properties":{"a":{"type":"date"}}})", "unknown type 'date'");
  refuses(R"({"type":"object","properties":{"a":{"type":"array","items":[{}]}}})", "tuple");
  EXPECT_NO_THROW(CompiledSchema::compile(json::parse(R"({"type":"object","title":"t","description":"d"})")));
}

// A recursive schema whose values can always stop (an optional "next") still reaches the frame
// limit: the validator used to accept the key "next" in the innermost frame and then no value
// could start (constrained decoding failed there).  A property, item or container is begun only
// where its smallest value fits.
TEST(JsonSchema, NothingIsBegunThatCannotFinishWithinTheFrames) {
  const CompiledSchema c = CompiledSchema::compile(json::parse(
      R"({"type":"object","properties":{"n":{"$ref":"#/$defs/L"}},
          "$defs":{"L":{"type":"object","properties":{"v":{"type":"integer"},"next":{"$ref":"#/$defs/L"},
                                                      "two":{"type":"array","minItems":1,"items":{"type":"array"}},
                                                      "list":{"type":"array","items":{"$ref":"#/$defs/L"}}}}}})"));
  const auto feeds = [&](const std::string& text) {
    SchemaValidator v(&c);
    for (const char ch : text)
      if (!v.feed(static_cast<uint8_t>(ch))) return false;
    return true;
  };
  std::string deep = R"({"n":)";
  for (int i = 0; i < 14; ++i) deep += R"({"next":)";
  deep += "{";  // 16 frames open: the innermost object
  EXPECT_TRUE(feeds(deep + R"("v":1})"));
  EXPECT_FALSE(feeds(deep + "\"n"));  // "next" needs a 17th frame
  EXPECT_TRUE(feeds(deep + "}"));
  std::string one_up = R"({"n":)";
  for (int i = 0; i < 13; ++i) one_up += R"({"next":)";
  one_up += "{";  // 15 frames: "next" fits, "two" (an array holding an array) does not
  EXPECT_TRUE(feeds(one_up + R"("next":{})"));
  EXPECT_FALSE(feeds(one_up + R"("tw)"));
  EXPECT_TRUE(feeds(one_up + R"("list":[)"));
  EXPECT_FALSE(feeds(one_up + R"("list":[{)"));  // an item object would be the 17th frame
  EXPECT_TRUE(feeds(one_up + R"("list":[]})"));
  EXPECT_EQ(c.node(0).min_frames, 1);
}

}  // namespace
}  // namespace k3
