// ChatSession: replies stream through the parser, later turns reuse the cached prefix without
// changing results, and errors leave the conversation as it was.
#include <gtest/gtest.h>

#include "base/error.h"
#include "engine/chat_session.h"
#include "support/test_support.h"
#include "synth/synth_checkpoint.h"

namespace k3 {
namespace {

class ChatSessionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    write_synth_checkpoint(dir_->path(), SynthOptions{});
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    model_ = Model::load(dir_->path());
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_model_dir(dir_->path()));
  }
  static testing::TempDir* dir_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};
testing::TempDir* ChatSessionTest::dir_ = nullptr;

TEST_F(ChatSessionTest, StreamedDeltasAddUpToTheReply) {
  ChatSessionOptions o;
  o.max_reply_tokens = 12;
  o.thinking = false;
  ChatSession s(*model_, *tokenizer_, o);
  std::string streamed;
  ChatReply r = s.send("Hello!", [&](const ChatDelta& d) { streamed += d.reasoning + d.content; });
  EXPECT_EQ(r.completion_tokens, 12);
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(streamed, r.message.content.value_or("") + r.message.reasoning_content.value_or(""));
  ASSERT_EQ(s.messages().size(), 2u);
  EXPECT_EQ(s.messages()[1]["role"], "assistant");
}

// The second turn in a long-lived session equals the same conversation replayed from scratch.
TEST_F(ChatSessionTest, PrefixReuseDoesNotChangeReplies) {
  ChatSessionOptions o;
  o.max_reply_tokens = 8;
  ChatSession a(*model_, *tokenizer_, o);
  a.send("First question?");
  ChatReply second = a.send("Second question?");

  // The same two turns, but the state is dropped between them (reset keeps nothing cached, so
  // the second turn re-prefills the whole conversation).
  ChatSession c(*model_, *tokenizer_, o);
  c.send("First question?");
  const ojson history = c.messages();
  ChatSession fresh(*model_, *tokenizer_, o);
  ChatReply second_again = fresh.send_after(history, "Second question?");
  EXPECT_EQ(second.message.content, second_again.message.content);
  EXPECT_EQ(second.message.reasoning_content, second_again.message.reasoning_content);
}

TEST_F(ChatSessionTest, ContextOverflowIsAnErrorAndKeepsTheConversation) {
  ChatSessionOptions o;
  o.max_reply_tokens = 4;
  o.context = 250;
  ChatSession s(*model_, *tokenizer_, o);
  s.send("Hi");
  const size_t before = s.messages().size();
  std::string long_text(3000, 'x');
  for (size_t i = 0; i < long_text.size(); i += 5) long_text[i] = ' ';
  EXPECT_THROW(s.send(long_text), Error);
  EXPECT_EQ(s.messages().size(), before);
}

}  // namespace
}  // namespace k3
