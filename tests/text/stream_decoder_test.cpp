// Incremental detokenization never emits part of a UTF-8 character, and concatenates to decode().
#include <gtest/gtest.h>

#include <random>

#include "text/stream_decoder.h"
#include "text/utf8.h"
#include "text_test_util.h"

namespace k3 {
namespace {

const Tokenizer& tok() { return testing::fixture_tokenizer("cl100k"); }
int32_t byte_id(unsigned char b) { return tok().ranks().byte_rank(b); }
const std::string kFffd = "\xEF\xBF\xBD";

TEST(StreamDecoder, HoldsBackSplitCharacters) {
  StreamDecoder d(tok());
  EXPECT_EQ(d.push(byte_id(0xE2)), "");
  EXPECT_EQ(d.pending(), 1u);
  EXPECT_EQ(d.push(byte_id(0x82)), "");
  EXPECT_EQ(d.push(byte_id(0xAC)), "\xE2\x82\xAC");  // €
  EXPECT_EQ(d.pending(), 0u);
  const std::string emoji = "\xF0\x9F\x99\x82";  // 🙂
  for (size_t i = 0; i + 1 < emoji.size(); ++i) EXPECT_EQ(d.push(byte_id(emoji[i])), "");
  EXPECT_EQ(d.push(byte_id(emoji[3])), emoji);
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamDecoder, InvalidBytesBecomeReplacementOnceKnown) {
  StreamDecoder d(tok());
  EXPECT_EQ(d.push(byte_id(0xE2)), "");
  EXPECT_EQ(d.push(byte_id('A')), kFffd + "A");
  EXPECT_EQ(d.push(byte_id(0xFF)), kFffd);
  EXPECT_EQ(d.push(byte_id(0x80)), kFffd);
  EXPECT_EQ(d.push(byte_id(0xF0)), "");
  EXPECT_EQ(d.push(byte_id(0x9F)), "");
  EXPECT_EQ(d.flush(), kFffd);  // truncated at the end of the stream
  EXPECT_EQ(d.pending(), 0u);
  EXPECT_EQ(d.push_bytes("ok"), "ok");
}

TEST(StreamDecoder, ConcatenationEqualsDecode) {
  // Random ids over the whole vocabulary, including tokens that are partial characters.
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> any(0, 100255);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids;
    const int len = 1 + trial % 40;
    for (int i = 0; i < len; ++i) ids.push_back(trial % 3 == 0 ? byte_id(static_cast<unsigned char>(rng() & 0xFF)) : any(rng));
    StreamDecoder d(tok());
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = d.push(id);
      EXPECT_TRUE(utf8::is_valid(piece));
      streamed += piece;
    }
    streamed += d.flush();
    EXPECT_EQ(streamed, tok().decode(ids)) << "trial " << trial;
  }
}

TEST(StreamDecoder, CorpusTextStreamsBackExactly) {
  for (const auto& [id, text] : testing::corpus()) {
    StreamDecoder d(tok());
    std::string streamed;
    for (int32_t t : tok().encode(text)) streamed += d.push(t);
    streamed += d.flush();
    EXPECT_EQ(streamed, text) << id;
  }
}

}  // namespace
}  // namespace k3
