// The tokenizer against OpenAI's own tiktoken (cl100k_base, o200k_base ids from the fixtures) and
// the K3 pre-tokenization regex against the reference pieces.
#include <gtest/gtest.h>

#include <iostream>

#include "text/pretokenizer.h"
#include "text/tokenizer_presets.h"
#include "text_test_util.h"

namespace k3 {
namespace {

using testing::corpus;
using testing::read_jsonl;
using testing::tokenizer_fixture;

void check_encoding(const std::string& name) {
  const Tokenizer& tok = testing::fixture_tokenizer(name);
  const std::vector<ojson> rows = read_jsonl(tokenizer_fixture(name + "_expected.jsonl"));
  int passed = 0, total = 0, all_mode = 0;
  for (const ojson& row : rows) {
    const std::string id = row.at("id").get<std::string>();
    const std::string mode = row.at("allowed_special").get<std::string>();
    ASSERT_TRUE(mode == "none" || mode == "all") << id << ": " << mode;
    ASSERT_TRUE(corpus().count(id)) << id;
    const std::string& text = corpus().at(id);
    const std::vector<int32_t> expected = row.at("ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok.encode(text, mode == "all");
    ++total;
    all_mode += mode == "all";
    EXPECT_EQ(got, expected) << name << " " << id << " (" << mode << ")";
    // decode(expected ids) gives back exactly the text's bytes.
    EXPECT_EQ(tok.decode_bytes(expected), text) << name << " decode " << id;
    EXPECT_EQ(tok.decode(got), text) << name << " roundtrip " << id;
    passed += got == expected && tok.decode_bytes(expected) == text;
  }
  EXPECT_EQ(total, 328);
  EXPECT_EQ(all_mode, 7);
  std::cout << "[fixture] " << name << "_expected.jsonl: " << passed << "/" << total << " passed\n";
}

TEST(TokenizerFixture, Cl100kMatchesTiktoken) { check_encoding("cl100k"); }

TEST(TokenizerFixture, O200kMatchesTiktoken) { check_encoding("o200k"); }

TEST(TokenizerFixture, K3PretokenizationMatchesReference) {
  const std::string pattern = testing::read_file(tokenizer_fixture("k3_pattern.txt"));
  ASSERT_EQ(pattern, preset_pattern(TokenizerPreset::kK3)) << "the k3 preset must be the reference regex";
  const Pretokenizer pre(pattern);
  int passed = 0, total = 0;
  for (const ojson& row : read_jsonl(tokenizer_fixture("k3_pretokenize_expected.jsonl"))) {
    const std::string id = row.at("id").get<std::string>();
    const std::vector<std::string> expected = row.at("pieces").get<std::vector<std::string>>();
    const std::vector<std::string> got = pre.split(corpus().at(id));
    ++total;
    passed += got == expected;
    EXPECT_EQ(got, expected) << "k3 pieces of " << id;
  }
  EXPECT_EQ(total, 321);
  std::cout << "[fixture] k3_pretokenize_expected.jsonl: " << passed << "/" << total << " passed\n";
}

TEST(TokenizerFixture, PresetPatternsAreTheFixturePatterns) {
  EXPECT_EQ(testing::read_file(tokenizer_fixture("cl100k_pattern.txt")), preset_pattern(TokenizerPreset::kCl100k));
  EXPECT_EQ(testing::read_file(tokenizer_fixture("o200k_pattern.txt")), preset_pattern(TokenizerPreset::kO200k));
}

TEST(TokenizerFixture, PresetSpecialsAreTheFixtureSpecials) {
  for (const std::string name : {"cl100k", "o200k"}) {
    const ojson expected = ojson::parse(testing::read_file(tokenizer_fixture(name + "_special_tokens.json")));
    const Tokenizer& tok = testing::fixture_tokenizer(name);
    EXPECT_EQ(tok.specials().tokens().size(), expected.size()) << name;
    for (auto it = expected.begin(); it != expected.end(); ++it)
      EXPECT_EQ(tok.special_id(it.key()), std::optional<int32_t>(it.value().get<int32_t>())) << name << " " << it.key();
  }
}

TEST(TokenizerFixture, RankFilesLoadCompletely) {
  EXPECT_EQ(testing::fixture_tokenizer("cl100k").ranks().size(), 100256u);
  EXPECT_EQ(testing::fixture_tokenizer("o200k").ranks().size(), 199998u);
  EXPECT_EQ(testing::fixture_tokenizer("cl100k").vocab_size(), 100277);
  EXPECT_EQ(testing::fixture_tokenizer("o200k").vocab_size(), 200019);
}

}  // namespace
}  // namespace k3
