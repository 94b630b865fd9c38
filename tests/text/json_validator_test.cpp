// JsonValidator against nlohmann::json::accept (an independent parser) on hand-picked documents
// and on random byte strings built from JSON's alphabet and mutated valid documents; and the
// prefix property constrained decoding relies on: every prefix of a valid document is accepted.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "text/json_validator.h"

namespace k3 {
namespace {

bool accepts(const std::string& s, bool object_only = false) {
  JsonValidator v(object_only);
  return v.feed(s) && v.complete_at_end();
}

TEST(JsonValidator, HandPickedDocuments) {
  for (const char* ok : {"{}", "[]", "0", "-0.5e+3", "1E9", "\"a\\u00e9\\n\"", "true", "null", " {\"a\": [1, 2.5, {\"b\": false}]} ",
                         "[[[[]]]]", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", "{\"k\":\"v\",\"k2\":-12}"}) {
    EXPECT_TRUE(accepts(ok)) << ok;
    EXPECT_TRUE(nlohmann::json::accept(ok)) << ok;
  }
  for (const char* bad : {"", "{", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "01", "1.", "1e", "-", "+1", ".5", "tru", "nul",
                          "\"\\x\"", "\"\\u12g4\"", "\"a\nb\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"",
                          "\"\xe2\x82\"", "{\"a\":1}}", "[1 2]", "{1:2}", "[}", "{]"}) {
    EXPECT_FALSE(accepts(bad)) << bad;
    EXPECT_FALSE(nlohmann::json::accept(bad)) << bad;
  }
  // \u escapes of UTF-16 surrogates pair, as nlohmann requires (a lone one used to pass, so
  // response_format output and tool arguments could fail to parse back: found by
  // fuzz/json_schema_fuzz.cpp); a prefix is refused as soon as no pairing can follow.
  for (const char* ok : {"\"\\ud83d\\ude00\"", "\"\\uDBFF\\uDFFFx\\uD7FF\\uE000\"", "{\"\\uD800\\uDC00\": 1}"}) {
    EXPECT_TRUE(accepts(ok)) << ok;
    EXPECT_TRUE(nlohmann::json::accept(ok)) << ok;
  }
  for (const char* bad : {"\"\\ud83d\"", "\"\\ude00\"", "\"\\ud83dx\"", "\"\\ud83d\\n\"", "\"\\ud83d\\ud83d\"",
                          "\"\\ude00\\ud83d\"", "{\"\\uDC00\": 1}"}) {
    EXPECT_FALSE(accepts(bad)) << bad;
    EXPECT_FALSE(nlohmann::json::accept(bad)) << bad;
  }
  for (const char* dead : {"\"\\udc", "\"\\ud83d\\u0", "\"\\ud83d\\ud8", "\"\\ud83d\\\""}) {
    JsonValidator v;
    EXPECT_FALSE(v.feed(std::string_view(dead))) << dead;
  }
  JsonValidator high;
  EXPECT_TRUE(high.feed(std::string_view("\"\\ud83d\\ud")));
  // Numbers that overflow a double are refused, as nlohmann refuses them (the bound is
  // conservative: 10^308 and up, whatever the fraction says).
  for (const char* ok : {"1e307", "9.99e307", "-1e307", "1e-400", "0.5e-9999", "12345678901234567890e287"}) {
    EXPECT_TRUE(accepts(ok)) << ok;
    EXPECT_TRUE(nlohmann::json::accept(ok)) << ok;
  }
  for (const char* bad : {"1e400", "-1e309", "625e10010014", "[2e99999]"}) {
    EXPECT_FALSE(accepts(bad)) << bad;
    EXPECT_FALSE(nlohmann::json::accept(bad)) << bad;
  }
  EXPECT_FALSE(accepts("1e308"));
  EXPECT_FALSE(accepts(std::string(309, '9')));
  EXPECT_TRUE(accepts(std::string(308, '9')));
  EXPECT_TRUE(accepts("{\"a\":1}", true));
  EXPECT_FALSE(accepts("[1]", true));
  EXPECT_FALSE(accepts("\"x\"", true));
  std::string deep(JsonValidator::kMaxDepth, '[');
  EXPECT_TRUE(JsonValidator().feed(deep));
  EXPECT_FALSE(JsonValidator().feed(deep + "["));
  EXPECT_TRUE(accepts("[" + std::string(JsonValidator::kMaxWhitespaceRun, ' ') + "1]"));
  EXPECT_FALSE(accepts("[" + std::string(JsonValidator::kMaxWhitespaceRun + 1, ' ') + "1]"));
  JsonValidator done;
  EXPECT_TRUE(done.feed("{} "));
  EXPECT_TRUE(done.complete());
  EXPECT_FALSE(done.feed("x"));
}

// A random JSON value of bounded depth, with random (short) whitespace.
std::string random_doc(std::mt19937& g, int depth) {
  const auto ws = [&] { return std::string(g() % 3, " \n\t"[g() % 3]); };
  const auto str = [&] {
    static const char* pieces[] = {"a", "Z", " ", "\\n", "\\\"", "\\\\", "\\u00e9", "\\u20AC", "\xc3\xa9", "\xe2\x82\xac",
                                   "\xf0\x9f\x98\x80", "/", "\\/", "\\ud83d\\uDE00"};
    std::string s = "\"";
    for (int i = g() % 5; i > 0; --i) s += pieces[g() % 14];
    return s + "\"";
  };
  switch (depth <= 0 ? g() % 4 : g() % 6) {
    case 0: return str();
    case 1: {
      static const char* nums[] = {"0", "-1", "12.5", "3e7", "-0.25E-2", "1000000"};
      return nums[g() % 6];
    }
    case 2: {
      static const char* lits[] = {"true", "false", "null"};
      return lits[g() % 3];
    }
    case 3: return "[]";
    case 4: {
      std::string s = "[" + ws();
      for (int i = 0, n = 1 + g() % 3; i < n; ++i) s += (i ? "," + ws() : "") + random_doc(g, depth - 1) + ws();
      return s + "]";
    }
    default: {
      std::string s = "{" + ws();
      for (int i = 0, n = g() % 3; i < n; ++i) s += (i ? "," + ws() : "") + str() + ws() + ":" + ws() + random_doc(g, depth - 1);
      return s + ws() + "}";
    }
  }
}

TEST(JsonValidator, AgreesWithNlohmannOnRandomAndMutatedDocuments) {
  std::mt19937 g(7);
  const std::string alphabet = "{}[]:,\"\\ \n0123456789-+.eEtrufalsn\x01\xc3\xa9\xff";
  int valid = 0, invalid = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s = random_doc(g, 4);
    if (i % 2) {  // mutate: replace, insert or delete one byte
      const size_t at = g() % (s.size() + 1);
      const char c = alphabet[g() % alphabet.size()];
      switch (g() % 3) {
        case 0: if (at < s.size()) s[at] = c; break;
        case 1: s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        default: if (at < s.size()) s.erase(at, 1); break;
      }
    }
    const bool want = nlohmann::json::accept(s);
    ASSERT_EQ(accepts(s), want) << s;
    (want ? valid : invalid)++;
    if (want) {  // every prefix is a viable prefix
      JsonValidator v;
      for (size_t k = 0; k < s.size(); ++k) ASSERT_TRUE(v.feed(static_cast<uint8_t>(s[k]))) << s << " at " << k;
    }
  }
  EXPECT_GT(valid, 9000);
  EXPECT_GT(invalid, 3000);
}

}  // namespace
}  // namespace k3
