// `k3 tokenize`, `k3 detokenize`, `k3 render-chat` and `k3 train-tokenizer` as a user runs them,
// against the fixtures.
#include <gtest/gtest.h>

#include "text/bpe_ranks.h"
#include "text/bpe_trainer.h"
#include "text/synth_tokenizer.h"
#include "text/xtml_renderer.h"
#include "text_test_util.h"

namespace k3 {
namespace {

using testing::run_k3;

std::string ids_json(const std::vector<int32_t>& ids) { return nlohmann::json(ids).dump() + "\n"; }

void check_tokenize_cli(const std::string& name) {
  const std::string rank_file = testing::tokenizer_fixture(name + "_base.tiktoken");
  int checked = 0, row_no = 0;
  for (const ojson& row : testing::read_jsonl(testing::tokenizer_fixture(name + "_expected.jsonl"))) {
    const bool all = row["allowed_special"] == "all";
    if (!all && row_no++ % 25 != 0) continue;  // every 25th plain string, and every allowed-special one
    const std::string& text = testing::corpus().at(row["id"].get<std::string>());
    const std::vector<int32_t> ids = row["ids"].get<std::vector<int32_t>>();
    const auto enc = run_k3("tokenize --tiktoken " + rank_file + " --pattern " + name + (all ? " --allow-special" : ""), text);
    ASSERT_EQ(enc.exit_code, 0) << enc.err;
    EXPECT_EQ(enc.out, ids_json(ids)) << name << " " << row["id"];
    const auto dec = run_k3("detokenize --tiktoken " + rank_file + " --pattern " + name, ids_json(ids));
    ASSERT_EQ(dec.exit_code, 0) << dec.err;
    EXPECT_EQ(dec.out, text) << name << " " << row["id"];
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

TEST(TextCli, TokenizeCl100k) { check_tokenize_cli("cl100k"); }
TEST(TextCli, TokenizeO200k) { check_tokenize_cli("o200k"); }

TEST(TextCli, TokenizeModelDir) {
  testing::TempDir dir;
  write_synth_tokenizer(dir.path(), 2048);
  const Tokenizer t = Tokenizer::from_model_dir(dir.path());
  const std::string text = "Hi <|open|> there";
  auto plain = run_k3("tokenize --model " + dir.path(), text);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out, ids_json(t.encode(text)));
  auto special = run_k3("tokenize --model " + dir.path() + " --allow-special", text);
  EXPECT_EQ(special.out, ids_json(t.encode(text, true)));
  EXPECT_NE(special.out.find("1795"), std::string::npos);
  auto back = run_k3("detokenize --model " + dir.path(), special.out);
  EXPECT_EQ(back.out, text);
  auto bad_utf8 = run_k3("tokenize --model " + dir.path(), "ok\xFF\xFE");
  ASSERT_EQ(bad_utf8.exit_code, 0) << bad_utf8.err;
  EXPECT_EQ(bad_utf8.out, ids_json(t.encode("ok\xEF\xBF\xBD\xEF\xBF\xBD")));
}

TEST(TextCli, TrainTokenizerLearnsMergesFromAFile) {
  testing::TempDir dir;
  std::string text;
  for (int i = 0; i < 50; ++i)
    text += "The quick brown fox jumps over the lazy dog " + std::to_string(i) + " times.\nTokenizers learn merges.\n";
  testing::write_file(dir.file("corpus.txt"), text);
  const std::string out = dir.file("tok");
  const auto r = run_k3("train-tokenizer --text " + dir.file("corpus.txt") + " --vocab-size 1024 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, out + "\n");
  // The library's tokens, in the K3 layout: 768 ordinary ranks, then the specials.
  EXPECT_EQ(testing::read_file(out + "/tiktoken.model"), BpeRanks(train_bpe_tokens(text, 768)).to_tiktoken());
  const Tokenizer t = Tokenizer::from_model_dir(out);
  EXPECT_EQ(t.vocab_size(), 1024);
  EXPECT_EQ(t.special_id("[BOS]"), std::optional<int32_t>(768));
  EXPECT_EQ(t.special_id("[PAD]"), std::optional<int32_t>(1023));
  // This small text runs out of pairs well before 768 ranks: said on stderr, filler after.
  EXPECT_NE(r.err.find("filler tokens"), std::string::npos) << r.err;
  EXPECT_EQ(static_cast<unsigned char>(t.ranks().bytes(767)[0]), 0xFF);
  // Its words became single tokens.
  for (const char* word : {"The", " quick", " brown", " jumps", " lazy", " dog", " times", "Tokenizers", " merges"})
    EXPECT_EQ(t.encode(word).size(), 1u) << word;
  // A sentence, with a word the text never had, round-trips through tokenize and detokenize.
  const std::string sentence = "The lazy dog jumps over the quick zebra 7 times.";
  const auto enc = run_k3("tokenize --tiktoken " + out + "/tiktoken.model", sentence);
  ASSERT_EQ(enc.exit_code, 0) << enc.err;
  EXPECT_EQ(enc.out, ids_json(t.encode(sentence)));
  EXPECT_LT(t.encode(sentence).size(), sentence.size() / 2);
  EXPECT_EQ(run_k3("tokenize --model " + out, sentence).out, enc.out);
  const auto dec = run_k3("detokenize --model " + out, enc.out);
  ASSERT_EQ(dec.exit_code, 0) << dec.err;
  EXPECT_EQ(dec.out, sentence);
}

TEST(TextCli, TrainTokenizerBadInputsAreClearErrors) {
  testing::TempDir dir;
  testing::write_file(dir.file("empty.txt"), "");
  testing::write_file(dir.file("text.txt"), "some text");
  const std::string out = " --out " + dir.file("tok");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--text " + dir.file("missing.txt"), dir.file("missing.txt") + ": cannot open: No such file or directory"},
      {"--text " + dir.path(), dir.path() + ": cannot read: is a directory"},
      {"--text " + dir.file("empty.txt"), dir.file("empty.txt") + ": the file is empty"},
      {"--text " + dir.file("text.txt") + " --vocab-size 511", "--vocab-size: must be in [512, 1048576]"},
      {"--text " + dir.file("text.txt") + " --vocab-size 1048577",
       "(256 bytes + 256 special tokens at least; got 1048577)"},
  };
  for (const auto& [args, message] : cases) {
    const auto r = run_k3("train-tokenizer " + args + out);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << ": " << r.err;
  }
  EXPECT_FALSE(testing::list_dir(dir.path()).count("tok")) << "an error left an output directory";
}

TEST(TextCli, BadInputsAreClearErrors) {
  const std::string rank_file = testing::tokenizer_fixture("cl100k_base.tiktoken");
  auto pattern = run_k3("tokenize --tiktoken " + rank_file + " --pattern gpt2", "x");
  EXPECT_EQ(pattern.exit_code, 1);
  EXPECT_NE(pattern.err.find("gpt2"), std::string::npos) << pattern.err;
  auto ids = run_k3("detokenize --tiktoken " + rank_file + " --pattern cl100k", "[1, \"x\"]");
  EXPECT_EQ(ids.exit_code, 1);
  EXPECT_NE(ids.err.find("entry 1"), std::string::npos) << ids.err;
  auto range = run_k3("detokenize --tiktoken " + rank_file + " --pattern cl100k", "[999999]");
  EXPECT_EQ(range.exit_code, 1);
  EXPECT_NE(range.err.find("999999"), std::string::npos) << range.err;
  auto missing = run_k3("tokenize --tiktoken /nonexistent.tiktoken", "x");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("/nonexistent.tiktoken"), std::string::npos) << missing.err;
}

TEST(TextCli, NulBytesAndDeepNestingAreClearErrors) {
  const std::string detok = "detokenize --tiktoken " + testing::tokenizer_fixture("cl100k_base.tiktoken") +
                            " --pattern cl100k";
  // nlohmann's parser ends the input at a NUL byte: "[1, 2]\0[3]" decoded 1 and 2 and said nothing.
  auto nul = run_k3(detok, std::string("[1, 2]\0[3]", 10));
  EXPECT_EQ(nul.exit_code, 1);
  EXPECT_NE(nul.err.find("stdin: contains a NUL byte at offset 6"), std::string::npos) << nul.err;
  // An entry nested 100,000 levels deep: its dump() for the message overflowed the stack.
  auto deep = run_k3(detok, std::string(100001, '[') + std::string(100001, ']'));
  EXPECT_EQ(deep.exit_code, 1);
  EXPECT_NE(deep.err.find("more than 256 levels deep"), std::string::npos) << deep.err;
  auto nested = run_k3(detok, "[5, [[1]]]");
  EXPECT_EQ(nested.exit_code, 1);
  EXPECT_NE(nested.err.find("entry 1 (an array of 1 entry) is not a token id"), std::string::npos) << nested.err;
  auto huge = run_k3(detok, std::string("[\"") + std::string(100000, 'x') + "\"]");
  EXPECT_EQ(huge.exit_code, 1);
  EXPECT_LT(huge.err.size(), 1000u) << "the whole entry was printed";

  testing::TempDir dir;
  const std::string file = dir.file("request.json");
  testing::write_file(file, std::string("{\"messages\": []}\0{\"messages\": [{\"role\": \"user\"}]}", 49));
  auto chat = run_k3("render-chat --request " + file);
  EXPECT_EQ(chat.exit_code, 1);
  EXPECT_NE(chat.err.find(file + ": invalid JSON (contains a NUL byte at offset 16)"), std::string::npos) << chat.err;
}

TEST(TextCli, RenderChatMatchesFixtures) {
  const std::vector<ojson> cases = testing::read_jsonl(testing::chat_fixture("cases.jsonl"));
  const std::vector<ojson> expected = testing::read_jsonl(testing::chat_fixture("expected.jsonl"));
  testing::TempDir dir;
  int checked = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (cases[i]["request"].is_null()) continue;
    const std::string file = dir.file("request.json");
    testing::write_file(file, cases[i]["request"].dump());
    const auto r = run_k3("render-chat --request " + file);
    const std::string name = cases[i]["name"].get<std::string>();
    if (expected[i].contains("error")) {
      EXPECT_EQ(r.exit_code, 1) << name;
      EXPECT_NE(r.err.find("error"), std::string::npos) << name << ": " << r.err;
    } else {
      ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
      EXPECT_EQ(r.out, expected[i]["text"].get<std::string>()) << name;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 49);
}

TEST(TextCli, RenderChatSegmentsAndIds) {
  const std::vector<ojson> cases = testing::read_jsonl(testing::chat_fixture("cases.jsonl"));
  const std::vector<ojson> expected = testing::read_jsonl(testing::chat_fixture("expected.jsonl"));
  testing::TempDir dir;
  write_synth_tokenizer(dir.path(), 2048);
  const Tokenizer t = Tokenizer::from_model_dir(dir.path());
  for (const std::string name : {"tool_roundtrip", "literal_markers_in_text", "options_combined"}) {
    size_t i = 0;
    while (cases[i]["name"] != name) ++i;
    const std::string file = dir.file(name + ".json");
    testing::write_file(file, cases[i]["request"].dump());
    const auto segs = run_k3("render-chat --segments --request " + file);
    ASSERT_EQ(segs.exit_code, 0) << segs.err;
    EXPECT_EQ(ojson::parse(segs.out), expected[i]["segments"]) << name;
    std::vector<ChatSegment> want;
    for (const ojson& s : expected[i]["segments"]) want.push_back({s["text"].get<std::string>(), s["allow_special"].get<bool>()});
    const auto ids = run_k3("render-chat --ids --model " + dir.path() + " --request " + file);
    ASSERT_EQ(ids.exit_code, 0) << ids.err;
    EXPECT_EQ(ids.out, ids_json(encode_segments(t, want))) << name;
    const auto from_stdin = run_k3("render-chat --request -", cases[i]["request"].dump());
    EXPECT_EQ(from_stdin.out, expected[i]["text"].get<std::string>()) << name;
  }
}

}  // namespace
}  // namespace k3
