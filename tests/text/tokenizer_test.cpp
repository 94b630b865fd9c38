// Tokenizer behaviour beyond the fixture corpora: special-token modes, invalid UTF-8, long inputs,
// the Kimi chunking, rank-file and config loading, base64 and the regex translation.
#include <gtest/gtest.h>

#include "base/error.h"
#include "text/base64.h"
#include "text/regex_translate.h"
#include "text/utf8.h"
#include "text_test_util.h"

namespace k3 {
namespace {

const Tokenizer& cl100k() { return testing::fixture_tokenizer("cl100k"); }

// cl100k's ranks with the k3 pattern, specials and chunking.
const Tokenizer& k3_on_cl100k() {
  static const Tokenizer t = Tokenizer::from_tiktoken(testing::tokenizer_fixture("cl100k_base.tiktoken"), TokenizerPreset::kK3);
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(Tokenizer, SpecialsArePlainTextUnlessAllowed) {
  const std::string text = "a<|endoftext|>b";
  const std::vector<int32_t> plain = cl100k().encode(text);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 100257), 0);
  EXPECT_EQ(cl100k().decode(plain), text);
  EXPECT_EQ(cl100k().encode(text, true), concat(concat(cl100k().encode("a"), {100257}), cl100k().encode("b")));
  EXPECT_EQ(cl100k().decode(std::vector<int32_t>{100257}), "<|endoftext|>");
}

TEST(Tokenizer, K3PresetSpecialsFollowTheRanks) {
  const Tokenizer& t = k3_on_cl100k();
  EXPECT_EQ(t.special_id("[BOS]"), std::optional<int32_t>(100256));
  EXPECT_EQ(t.special_id("<|end_of_msg|>"), std::optional<int32_t>(100258));
  EXPECT_EQ(t.special_id("<|open|>"), std::optional<int32_t>(100259));
  EXPECT_EQ(t.special_id("<|media_pad|>"), std::optional<int32_t>(100256 + 21));
  EXPECT_EQ(t.special_id("<|reserved_token_100264|>"), std::optional<int32_t>(100264));
  EXPECT_EQ(t.special_id("[PAD]"), std::optional<int32_t>(100256 + 255));
  EXPECT_EQ(t.vocab_size(), 100256 + 256);
  EXPECT_EQ(t.encode("<|open|>x<|sep|>", true), concat(concat({100259}, t.encode("x")), {100261}));
}

TEST(Tokenizer, InvalidUtf8IsReplacedLikePython) {
  // The Unicode standard's example (Table 3-8): one U+FFFD per maximal subpart.
  const std::string bad = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  const std::string fffd = "\xEF\xBF\xBD";
  const std::string want = "a" + fffd + fffd + fffd + "b" + fffd + "c" + fffd + fffd + "d";
  EXPECT_EQ(utf8::sanitize(bad), want);
  EXPECT_EQ(utf8::sanitize("\xED\xA0\x80"), fffd + fffd + fffd);  // a surrogate
  EXPECT_EQ(utf8::sanitize("\xC0\xAF"), fffd + fffd);            // overlong
  EXPECT_EQ(utf8::sanitize("ok\xE2\x82"), "ok" + fffd);          // truncated at the end
  for (const Tokenizer* t : {&cl100k(), &k3_on_cl100k()}) {
    std::vector<int32_t> ids;
    ASSERT_NO_THROW(ids = t->encode(bad));
    EXPECT_EQ(t->decode(ids), want);
    EXPECT_EQ(t->encode(bad), t->encode(want));
  }
}

TEST(Tokenizer, DecodeReplacesSplitCharacters) {
  const int32_t e2 = cl100k().ranks().byte_rank(0xE2);
  ASSERT_GE(e2, 0);
  EXPECT_EQ(cl100k().decode_bytes(std::vector<int32_t>{e2}), "\xE2");
  EXPECT_EQ(cl100k().decode(std::vector<int32_t>{e2}), "\xEF\xBF\xBD");
  EXPECT_THROW(cl100k().decode(std::vector<int32_t>{100261}), Error);  // between the specials: no such id
  EXPECT_THROW(cl100k().decode(std::vector<int32_t>{-1}), Error);
}

TEST(Tokenizer, OneMegabyteWithoutSpaces) {
  const std::string letters(1 << 20, 'a');
  std::string mixed;
  while (mixed.size() < (1 << 20)) mixed += "abcXYZ中文δ_9";
  for (const Tokenizer* t : {&cl100k(), &testing::fixture_tokenizer("o200k"), &k3_on_cl100k()}) {
    for (const std::string* s : std::vector<const std::string*>{&letters, &mixed}) {
      const std::vector<int32_t> ids = t->encode(*s);
      EXPECT_FALSE(ids.empty());
      EXPECT_EQ(t->decode(ids), *s);
    }
  }
}

TEST(Tokenizer, KimiChunkingCutsLongRuns) {
  const Tokenizer& t = k3_on_cl100k();
  const std::string spaces(30000, ' ');
  EXPECT_EQ(t.encode(spaces + "x"), concat(t.encode(std::string(25000, ' ')), t.encode(std::string(5000, ' ') + "x")));
  std::string word(25001, 'q');
  EXPECT_EQ(t.encode(word), concat(t.encode(std::string(25000, 'q')), t.encode("q")));
  // 400,000-character windows (characters, not bytes).
  std::string text;
  while (text.size() < 400000 * 3) text += "你 ";
  const std::string head = text.substr(0, 600000);  // 400,000 characters: 200,000 × "你 "
  EXPECT_EQ(t.encode(text), concat(t.encode(head), t.encode(text.substr(600000))));
  // cl100k itself (tiktoken) does not chunk.
  EXPECT_NE(cl100k().encode(spaces + "x"), concat(cl100k().encode(std::string(25000, ' ')),
                                                  cl100k().encode(std::string(5000, ' ') + "x")));
}

TEST(Tokenizer, KimiChunkingNeverCutsASpecialToken) {
  // 3,000 "<|media_pad|>" (39,000 characters, no space) with specials allowed: 3,000 pad ids.
  // The chunking ran over the whole text first and cut a pad at character 25,000, so an image of
  // ~1,900+ tokens came out with ordinary tokens in its pad run.
  const Tokenizer& t = k3_on_cl100k();
  const int32_t pad = *t.special_id("<|media_pad|>");
  std::string pads;
  for (int i = 0; i < 3000; ++i) pads += "<|media_pad|>";
  EXPECT_EQ(t.encode(pads, true), std::vector<int32_t>(3000, pad));
  // The text between specials is still chunked as before.
  const std::string word(25001, 'q');
  EXPECT_EQ(t.encode("<|open|>" + word + "<|sep|>", true),
            concat(concat(concat({*t.special_id("<|open|>")}, t.encode(word)), {}), {*t.special_id("<|sep|>")}));
  EXPECT_EQ(t.encode(word, true), t.encode(word));
}

TEST(Tokenizer, RankFileErrorsNameTheFile) {
  try {
    BpeRanks::parse_tiktoken("YQ== 0\nYg== 0\n", "dup.tiktoken");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dup.tiktoken"), std::string::npos) << e.what();
  }
  EXPECT_THROW(BpeRanks::parse_tiktoken("YQ== 0\nYQ== 1\n", "same-bytes"), Error);
  EXPECT_THROW(BpeRanks::parse_tiktoken("not*base64 0\n", "x"), Error);
  EXPECT_THROW(BpeRanks::parse_tiktoken("YQ== -3\n", "x"), Error);
  EXPECT_THROW(BpeRanks::parse_tiktoken("YQ==\n", "x"), Error);
  EXPECT_THROW(Tokenizer::from_model_dir("/nonexistent/k3"), Error);
  EXPECT_THROW(parse_tokenizer_preset("gpt2"), Error);
}

TEST(Tokenizer, ModelDirConfigNamesTheSpecials) {
  testing::TempDir dir;
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  tokens.push_back("ab");
  testing::write_file(dir.file("tiktoken.model"), BpeRanks(tokens).to_tiktoken());
  testing::write_file(dir.file("tokenizer_config.json"),
                      R"({"added_tokens_decoder": {"257": {"content": "[BOS]"}, "260": {"content": "<|open|>"}}})");
  const Tokenizer t = Tokenizer::from_model_dir(dir.path());
  EXPECT_EQ(t.special_id("[BOS]"), std::optional<int32_t>(257));
  EXPECT_EQ(t.special_id("<|open|>"), std::optional<int32_t>(260));
  EXPECT_EQ(t.special_id("<|reserved_token_258|>"), std::optional<int32_t>(258));
  EXPECT_EQ(t.vocab_size(), 257 + 256);
  EXPECT_EQ(t.encode("ab<|open|>", true), (std::vector<int32_t>{256, 260}));
  testing::write_file(dir.file("tokenizer_config.json"), R"({"added_tokens_decoder": {"5": {"content": "x"}}})");
  EXPECT_THROW(Tokenizer::from_model_dir(dir.path()), Error);
  testing::write_file(dir.file("tokenizer_config.json"), "{not json");
  EXPECT_THROW(Tokenizer::from_model_dir(dir.path()), Error);
  // An id near 2^31 overflowed the vocabulary size (and the id loops that follow it).
  testing::write_file(dir.file("tokenizer_config.json"), R"({"added_tokens_decoder": {"2147483647": {"content": "x"}}})");
  try {
    Tokenizer::from_model_dir(dir.path());
    ADD_FAILURE() << "accepted id 2147483647";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'2147483647' is beyond"), std::string::npos) << e.what();
  }
}

TEST(Base64, RoundTripAndRejects) {
  for (const std::string& s : std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xFF\x10", 3)})
    EXPECT_EQ(base64::decode(base64::encode(s)), std::optional<std::string>(s));
  EXPECT_EQ(base64::encode("hello"), "aGVsbG8=");
  EXPECT_FALSE(base64::decode("aGVsbG8").has_value());
  EXPECT_FALSE(base64::decode("aGV=bG8=").has_value());
  EXPECT_FALSE(base64::decode("a!==").has_value());
}

TEST(RegexTranslate, ClassIntersectionScriptsAndSpaces) {
  EXPECT_EQ(tiktoken_regex_to_pcre2(R"([\p{L}&&[^\p{Han}]]+)"), R"((?:(?![\p{sc:Han}])[\p{L}])+)");
  EXPECT_EQ(tiktoken_regex_to_pcre2(R"([\p{Lu}\p{N}])"), R"([\p{Lu}\p{N}])");
  const std::string ws = tiktoken_regex_to_pcre2(R"(\s)");
  EXPECT_NE(ws.find("\\x{3000}"), std::string::npos);
  EXPECT_EQ(ws.find("180E"), std::string::npos);
  EXPECT_EQ(tiktoken_regex_to_pcre2(R"(\S)"), "[^" + ws.substr(1));
  EXPECT_THROW(tiktoken_regex_to_pcre2(R"([^a&&[b]])"), Error);
  EXPECT_THROW(tiktoken_regex_to_pcre2(R"([a)"), Error);
  // Script=Han, not Script_Extensions: 々 is Han, 、 and ー are not.
  const Pretokenizer pre(R"([\p{Han}]+|[^\p{Han}]+)");
  EXPECT_EQ(pre.split("日々、ー"), (std::vector<std::string>{"日々", "、ー"}));
  // U+180E is not White_Space.
  EXPECT_EQ(Pretokenizer(R"(\s+|\S+)").split("a\xE1\xA0\x8E b"), (std::vector<std::string>{"a\xE1\xA0\x8E", " ", "b"}));
}

}  // namespace
}  // namespace k3
