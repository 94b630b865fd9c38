// parse_json_document: repeated keys, NUL bytes and bad syntax are errors naming the source.
#include "io/json_document.h"

#include <gtest/gtest.h>

#include <string>

#include "base/error.h"

namespace k3 {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_json_document(text, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonDocument, RepeatedKeysAreNamedWithTheirPath) {
  // nlohmann alone keeps the last value: a 64-wide model where 7168 was written first.
  EXPECT_NE(error_of(R"({"hidden_size": 7168, "hidden_size": 64})")
                .find("cfg.json: key 'hidden_size' appears twice (JSON keeps only one of them; remove the other)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"a": 1, "text_config": {"x": 1, "y": {}, "x": 2}})").find("key 'text_config.x' appears twice"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"list": [{"k": 1}, {"k": 1, "k": 2}]})").find("key 'list.k' appears twice"), std::string::npos);
  EXPECT_NE(error_of(R"([{"a": {"b": 1, "b": 1}}])").find("key 'a.b' appears twice"), std::string::npos);
}

TEST(JsonDocument, EqualKeysInDifferentObjectsAreFine) {
  const nlohmann::json j = parse_json_document(
      R"({"a": {"x": 1}, "b": {"x": 2, "c": {"x": 3}}, "l": [{"x": 4}, {"x": 5}], "x": 6})", "cfg.json");
  EXPECT_EQ(j["b"]["c"]["x"], 3);
  EXPECT_EQ(j["l"][1]["x"], 5);
  EXPECT_EQ(j["x"], 6);
  EXPECT_EQ(parse_json_document("[1, 2]", "cfg.json").size(), 2u);
}

TEST(JsonDocument, NulAndBadSyntaxAreNamed) {
  EXPECT_NE(error_of(std::string("{\"a\": 1}\0{\"a\": 2}", 17)).find("cfg.json: contains a NUL byte at offset 8"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"a": )").find("cfg.json: not valid JSON: "), std::string::npos);
  EXPECT_NE(error_of("").find("cfg.json: not valid JSON: "), std::string::npos);
}

TEST(JsonDocument, NotingDuplicatesLeavesTheCallerToDecide) {
  const std::string text = R"({"t": {"dtype": "F32", "dtype": "U8"}})";
  DuplicateKey dup{"stale", 7};
  const nlohmann::json j = parse_json_noting_duplicates(text.data(), text.data() + text.size(), &dup);
  EXPECT_EQ(dup.path, "t.dtype");
  EXPECT_EQ(dup.depth, 2);
  EXPECT_TRUE(j.is_object());
  const std::string fine = R"({"t": {"dtype": "F32"}})";
  parse_json_noting_duplicates(fine.data(), fine.data() + fine.size(), &dup);
  EXPECT_EQ(dup.path, "");
  EXPECT_EQ(dup.depth, 0);
}

}  // namespace
}  // namespace k3
