// check_tokenizer_against_config: a checkpoint's tokenizer must fit its config's vocabulary and
// agree on the bos / pad / stop / media placeholder ids; every mismatch is named.  Also the
// synthetic tokenizer at the release's shape (163,584 ranks + 256 specials) and how long it takes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "model/k3_config.h"
#include "support/test_support.h"
#include "text/synth_tokenizer.h"
#include "text/tokenizer.h"

namespace k3 {
namespace {

// The ids a synthetic config of this vocabulary has (synth_checkpoint.cpp: K3's offsets).
ModelConfig config_for(int vocab) {
  ModelConfig mc;
  mc.model_type = "kimi_k3";
  mc.text.vocab_size = vocab;
  mc.bos_token_id = vocab - 256;           // [BOS]
  mc.stop_token_ids = {vocab - 256 + 2};   // <|end_of_msg|>
  mc.pad_token_id = vocab - 1;             // [PAD]
  mc.media_placeholder_token_id = vocab - 256 + 21;  // <|media_pad|>
  return mc;
}

// The error check_tokenizer_against_config throws ("" if none).
std::string check_error(const Tokenizer& t, const ModelConfig& mc) {
  try {
    check_tokenizer_against_config(t, mc);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class TokenizerCheck : public ::testing::Test {
 protected:
  void SetUp() override { write_synth_tokenizer(dir.path(), 2048); }
  testing::TempDir dir;
};

TEST_F(TokenizerCheck, MatchingConfigPasses) {
  const Tokenizer t = Tokenizer::from_model_dir(dir.path());
  EXPECT_EQ(check_error(t, config_for(2048)), "");
  // A larger embedding table than the tokenizer uses is fine (rows nobody produces).
  ModelConfig wider = config_for(2048);
  wider.text.vocab_size = 4096;
  EXPECT_EQ(check_error(t, wider), "");
  ASSERT_TRUE(t.bos() && t.eos() && t.pad());
  EXPECT_EQ(t.bos()->id, 1792);
  EXPECT_EQ(t.eos()->id, 1793);
  EXPECT_EQ(t.pad()->id, 2047);
}

TEST_F(TokenizerCheck, VocabularyLargerThanTheConfigsIsRefused) {
  const Tokenizer t = Tokenizer::from_model_dir(dir.path());
  ModelConfig mc = config_for(2048);
  mc.text.vocab_size = 2000;
  mc.pad_token_id = -1;
  const std::string e = check_error(t, mc);
  EXPECT_NE(e.find("tiktoken.model (1792 ranks)"), std::string::npos) << e;
  EXPECT_NE(e.find("256 special tokens) use ids up to 2047"), std::string::npos) << e;
  EXPECT_NE(e.find("config.json's vocab_size 2000"), std::string::npos) << e;
}

TEST_F(TokenizerCheck, BosThatIsAnotherSpecialIsRefused) {
  const Tokenizer t = Tokenizer::from_model_dir(dir.path());
  ModelConfig mc = config_for(2048);
  mc.bos_token_id = 1793;
  const std::string e = check_error(t, mc);
  EXPECT_NE(e.find("config.json: bos_token_id 1793 is the special token '[EOS]', but"), std::string::npos) << e;
  EXPECT_NE(e.find("tokenizer_config.json names bos_token '[BOS]' (id 1792)"), std::string::npos) << e;
}

TEST_F(TokenizerCheck, BosThatIsAnOrdinaryTokenIsRefused) {
  const Tokenizer t = Tokenizer::from_model_dir(dir.path());
  ModelConfig mc = config_for(2048);
  mc.bos_token_id = 100;
  const std::string e = check_error(t, mc);
  EXPECT_NE(e.find("bos_token_id 100 is an ordinary token of"), std::string::npos) << e;
}

TEST_F(TokenizerCheck, PadMismatchIsRefused) {
  const Tokenizer t = Tokenizer::from_model_dir(dir.path());
  ModelConfig mc = config_for(2048);
  mc.pad_token_id = 2046;
  const std::string e = check_error(t, mc);
  EXPECT_NE(e.find("pad_token_id 2046 is the special token '[UNK]', but"), std::string::npos) << e;
  EXPECT_NE(e.find("names pad_token '[PAD]' (id 2047)"), std::string::npos) << e;
}

TEST_F(TokenizerCheck, StopIdsMustBeSpecialTokens) {
  const Tokenizer t = Tokenizer::from_model_dir(dir.path());
  ModelConfig mc = config_for(4096);  // room for ids past the tokenizer
  mc.bos_token_id = 1792;
  mc.pad_token_id = 2047;
  mc.media_placeholder_token_id = 1813;
  mc.stop_token_ids = {1794, 5, 3000};
  const std::string e = check_error(t, mc);
  EXPECT_EQ(e.find("eos_token_id 1794"), std::string::npos) << e;
  EXPECT_NE(e.find("eos_token_id 5 is an ordinary token of"), std::string::npos) << e;
  EXPECT_NE(e.find("eos_token_id 3000 is no token of the tokenizer"), std::string::npos) << e;
  EXPECT_NE(e.find("(2 problems)"), std::string::npos) << e;
}

TEST_F(TokenizerCheck, MediaPlaceholderMustBeASpecialToken) {
  const Tokenizer t = Tokenizer::from_model_dir(dir.path());
  ModelConfig mc = config_for(2048);
  mc.media_placeholder_token_id = 7;
  const std::string e = check_error(t, mc);
  EXPECT_NE(e.find("media_placeholder_token_id 7 is an ordinary token"), std::string::npos) << e;
}

TEST_F(TokenizerCheck, TokenizerConfigRoleThatIsNoSpecialIsRefused) {
  const std::string path = dir.file("tokenizer_config.json");
  nlohmann::json cfg = nlohmann::json::parse(testing::read_file(path));
  cfg["eos_token"] = "[NOPE]";
  cfg["bos_token"] = {{"content", "[ALSO-NOPE]"}};
  std::ofstream(path) << cfg.dump();
  const Tokenizer t = Tokenizer::from_model_dir(dir.path());
  const std::string e = check_error(t, config_for(2048));
  EXPECT_NE(e.find("tokenizer_config.json: eos_token '[NOPE]' is not one of its special tokens"), std::string::npos)
      << e;
  EXPECT_NE(e.find("bos_token '[ALSO-NOPE]' is not one of its special tokens"), std::string::npos) << e;
  EXPECT_NE(e.find(dir.path()), std::string::npos) << e;
}

// The release's shape: 163,584 ranks + 256 specials, written (and read back) in seconds.
TEST(SynthTokenizerAtK3Size, ReleasedShapeInSeconds) {
  testing::TempDir dir;
  const auto t0 = std::chrono::steady_clock::now();
  write_synth_tokenizer(dir.path(), 163840);
  const double write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Tokenizer t = Tokenizer::from_model_dir(dir.path());
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("synthetic tokenizer at 163840: written in %.2f s, written and loaded in %.2f s\n", write_s, total_s);
  EXPECT_EQ(t.ranks().end_rank(), 163584);
  EXPECT_EQ(t.specials().tokens().size(), 256u);
  EXPECT_EQ(t.vocab_size(), 163840);
  EXPECT_EQ(t.special_id("[BOS]"), 163584);
  EXPECT_EQ(t.special_id("[EOS]"), 163585);
  EXPECT_EQ(t.special_id("<|end_of_msg|>"), 163586);
  EXPECT_EQ(t.special_id("<|media_pad|>"), 163605);
  EXPECT_EQ(t.special_id("[PAD]"), 163839);
  EXPECT_EQ(check_error(t, config_for(163840)), "");
  EXPECT_LT(total_s, 30.0);  // a few seconds; minutes would make the sparse layout slow to write
}

}  // namespace
}  // namespace k3
