// The synthetic tokenizer of the built-in model: K3 special layout at its own offsets, loads back
// with the real loader, and round-trips text.
#include <gtest/gtest.h>

#include "base/error.h"
#include "text/synth_tokenizer.h"
#include "text/xtml_renderer.h"
#include "text_test_util.h"

namespace k3 {
namespace {

TEST(SynthTokenizer, K3SpecialsAtTheirOffsets) {
  testing::TempDir dir;
  write_synth_tokenizer(dir.path(), 2048);
  const Tokenizer t = Tokenizer::from_model_dir(dir.path());
  EXPECT_EQ(t.vocab_size(), 2048);
  EXPECT_EQ(t.ranks().size(), 1792u);
  const std::vector<std::pair<std::string, int32_t>> want = {
      {"[BOS]", 1792},          {"[EOS]", 1793},          {"<|end_of_msg|>", 1794},  {"<|open|>", 1795},
      {"<|close|>", 1796},      {"<|sep|>", 1797},        {"[start_header_id]", 1798}, {"[end_header_id]", 1799},
      {"[EOT]", 1801},          {"<|media_begin|>", 1810}, {"<|media_content|>", 1811}, {"<|media_end|>", 1812},
      {"<|media_pad|>", 1813},  {"<osagent_mode>", 1857}, {"[UNK]", 2046},           {"[PAD]", 2047},
      {"<|reserved_token_1800|>", 1800}};
  for (const auto& [text, id] : want) EXPECT_EQ(t.special_id(text), std::optional<int32_t>(id)) << text;
  EXPECT_EQ(t.specials().tokens().size(), 256u);
  const ojson cfg = ojson::parse(testing::read_file(dir.file("tokenizer_config.json")));
  EXPECT_EQ(cfg["eos_token"], "[EOS]");
  EXPECT_EQ(cfg["tokenizer_class"], "TikTokenTokenizer");
}

TEST(SynthTokenizer, LearnsMergesAndRoundTrips) {
  testing::TempDir dir;
  write_synth_tokenizer(dir.path(), 2048);
  const Tokenizer t = Tokenizer::from_model_dir(dir.path());
  for (int32_t r = 256; r < 1792; ++r) {
    const std::string_view b = t.ranks().bytes(r);
    ASSERT_GE(b.size(), 2u) << r;
    EXPECT_NE(static_cast<unsigned char>(b[0]), 0xFF) << "rank " << r << " is filler: the sample text is too small";
  }
  // Merges compress ordinary text well below one token per byte.
  const std::string text = "The capital of France is Paris. 你好，世界！ def main():\n    return 42\n";
  const std::vector<int32_t> ids = t.encode(text);
  EXPECT_LT(ids.size() * 2, text.size());
  EXPECT_EQ(t.decode(ids), text);
  for (const auto& [id, s] : testing::corpus()) EXPECT_EQ(t.decode(t.encode(s)), s) << id;
  // A rendered chat prompt encodes its markers as single special tokens.
  const std::vector<ChatSegment> segs = render_chat(ojson::parse(R"([{"role":"user","content":"Hi"}])"), nullptr, ChatOptions{});
  const std::vector<int32_t> prompt = encode_segments(t, segs);
  EXPECT_EQ(prompt.front(), 1795);  // <|open|>
  EXPECT_EQ(t.decode(prompt), segments_text(segs));
}

TEST(SynthTokenizer, DeterministicAndSized) {
  EXPECT_EQ(synth_tokenizer_tokens(600), synth_tokenizer_tokens(600));
  testing::TempDir a, b;
  write_synth_tokenizer(a.path(), 512);
  write_synth_tokenizer(b.path(), 512);
  EXPECT_EQ(testing::read_file(a.file("tiktoken.model")), testing::read_file(b.file("tiktoken.model")));
  EXPECT_EQ(Tokenizer::from_model_dir(a.path()).vocab_size(), 512);
  const std::vector<std::string> big = synth_tokenizer_tokens(4000);  // more than the sample can teach: filler
  EXPECT_EQ(big.size(), 4000u);
  EXPECT_EQ(static_cast<unsigned char>(big.back()[0]), 0xFF);
  EXPECT_NO_THROW(BpeRanks{big});
  EXPECT_THROW(write_synth_tokenizer(a.path(), 511), Error);
}

}  // namespace
}  // namespace k3
