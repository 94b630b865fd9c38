// Python json.dumps compatibility (the values are what CPython 3 prints).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "text/py_json.h"

namespace k3 {
namespace {

TEST(PyJson, FloatReprMatchesPython) {
  const std::vector<std::pair<double, std::string>> cases = {
      {1.0, "1.0"},          {1e5, "100000.0"},
      {-0.0, "-0.0"},        {0.0, "0.0"},
      {1.5e-7, "1.5e-07"},   {0.1, "0.1"},
      {2.5, "2.5"},          {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {1e-4, "0.0001"},      {1e-5, "1e-05"},
      {1.0 / 3, "0.3333333333333333"},
      {1e22, "1e+22"},       {123456789.123, "123456789.123"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {5e-324, "5e-324"},    {12345678901234567.0, "1.2345678901234568e+16"},
      {-2.5e-10, "-2.5e-10"}, {100.0, "100.0"}};
  for (const auto& [v, want] : cases) EXPECT_EQ(py_float_repr(v), want) << want;
  EXPECT_EQ(py_float_repr(std::numeric_limits<double>::infinity()), "Infinity");
  EXPECT_EQ(py_float_repr(-std::numeric_limits<double>::infinity()), "-Infinity");
  EXPECT_EQ(py_float_repr(std::nan("")), "NaN");
}

TEST(PyJson, DumpsLikePython) {
  const ojson v = ojson::parse(R"({"b": [1, 2.0, null, true, -7], "a": "x\ny\"\\\u0001\u001f\u007fé中", "e": {}, "l": []})");
  // json.dumps(v, ensure_ascii=False)
  EXPECT_EQ(py_json_dumps(v), "{\"b\": [1, 2.0, null, true, -7], \"a\": \"x\\ny\\\"\\\\\\u0001\\u001f\x7f\xC3\xA9\xE4\xB8\xAD\", "
                              "\"e\": {}, \"l\": []}");
  // json.dumps(v, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
  EXPECT_EQ(py_json_dumps(v, kPyJsonCompactSorted),
            "{\"a\":\"x\\ny\\\"\\\\\\u0001\\u001f\x7f\xC3\xA9\xE4\xB8\xAD\",\"b\":[1,2.0,null,true,-7],\"e\":{},\"l\":[]}");
  EXPECT_EQ(py_json_dumps(ojson::parse("12345678901234567890")), "12345678901234567890");
  EXPECT_EQ(py_json_dumps(ojson::parse("\"\\b\\f\\t\\r\"")), "\"\\b\\f\\t\\r\"");
}

TEST(PyJson, LoadsKeepsOrderAndLastDuplicate) {
  const std::optional<ojson> v = py_json_loads(R"({"z": 1, "a": 2, "z": 3})");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(py_json_dumps(*v), "{\"z\": 3, \"a\": 2}");
  EXPECT_FALSE(py_json_loads("{\"a\": 1").has_value());
  EXPECT_FALSE(py_json_loads("").has_value());
  EXPECT_TRUE(py_json_loads("  [1]  ").has_value());
}

TEST(PyJson, NestingDepthScanSkipsStrings) {
  EXPECT_FALSE(json_nests_deeper_than("[[1]]", 2));
  EXPECT_TRUE(json_nests_deeper_than("[[[1]]]", 2));
  EXPECT_TRUE(json_nests_deeper_than("{\"a\": {\"b\": [0]}}", 2));
  // Brackets and escaped quotes inside strings are not nesting.
  EXPECT_FALSE(json_nests_deeper_than(R"(["[[[[", "\"[[[[\"", {"k": "{{{{"}])", 2));
  EXPECT_TRUE(json_nests_deeper_than(R"(["\\", [[0]]])", 2));  // an escaped backslash ends before the quote
  // Siblings do not add up.
  EXPECT_FALSE(json_nests_deeper_than("[[0], [0], [0], {\"a\": 0}]", 2));
}

TEST(PyJson, LoadsRefusesNestingPastTheLimit) {
  const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(py_json_loads(ok).has_value());
  // 100k levels (a 200 KB text) used to reach the recursive dump and overflow the stack.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_FALSE(py_json_loads(deep).has_value());
  EXPECT_FALSE(py_json_loads("[" + ok + "]").has_value());
}

}  // namespace
}  // namespace k3
