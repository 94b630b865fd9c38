// ChatSession: replies stream through the parser, later turns reuse the cached prefix without
// changing results, and errors leave the conversation as it was; image turns place the media
// prompt, override the pad embeddings, and keep prefix reuse exact.
#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"
#include "engine/chat_session.h"
#include "engine/multimodal.h"
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
  const VisionModel& vision() {
    if (!vision_) vision_ = load_vision_for(*model_, dir_->path());
    return *vision_;
  }
  static testing::TempDir* dir_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<VisionModel> vision_;
};

Image pattern(int w, int h, int salt) {
  Image img(w, h, 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) img.at(x, y)[c] = static_cast<uint8_t>((x * 7 + y * 3 * salt + c * 50 + salt) % 256);
  return img;
}
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

// A reply cut by the context (not by max_reply_tokens) says so, and a first message that cannot
// fit asks for a larger context (/reset could not help it).
TEST_F(ChatSessionTest, ContextCutsAreTold) {
  ChatSessionOptions o;
  o.max_reply_tokens = 1000;
  o.thinking = false;
  ChatSession probe(*model_, *tokenizer_, o);
  o.context = probe.send("Hi").prompt_tokens + 3;  // room for 3 reply tokens
  ChatSession s(*model_, *tokenizer_, o);
  const ChatReply r = s.send("Hi");
  ASSERT_EQ(r.finish_reason, "length");
  EXPECT_TRUE(r.context_full);
  EXPECT_EQ(r.completion_tokens, 3);
  ChatSessionOptions tiny = o;
  tiny.context = 8;
  ChatSession t(*model_, *tokenizer_, tiny);
  try {
    t.send("Hi");
    ADD_FAILURE() << "a first message past the context was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("use a larger --ctx"), std::string::npos) << e.what();
  }
  ChatSessionOptions cut = o;
  cut.context = 0;
  cut.max_reply_tokens = 2;
  ChatSession c(*model_, *tokenizer_, cut);
  const ChatReply rc = c.send("Hi");
  ASSERT_EQ(rc.finish_reason, "length");
  EXPECT_FALSE(rc.context_full);
}

// Two turns with an image each, replayed with and without prefix reuse: the second turn's
// first logits agree, the reused session prefills only the new text and image, and the
// messages carry the images as parts.  (The first reply is empty: a random model's replies
// are cut mid-format, and a history that does not re-render to the consumed tokens cannot be
// reused -- the recurrent state cannot be rewound.)
TEST_F(ChatSessionTest, ImageTurnsAndExactPrefixReuse) {
  ChatSessionOptions o;
  o.max_reply_tokens = 3;
  o.thinking = false;
  std::vector<float> logits[2];
  int prompt_tokens[2] = {};
  const int64_t pads_a = encode_prompt_image(vision(), pattern(336, 224, 1), "a").prompt.num_pads;
  const int64_t pads_b = encode_prompt_image(vision(), pattern(112, 112, 2), "b").prompt.num_pads;
  for (int reuse = 0; reuse < 2; ++reuse) {
    ChatSessionOptions oo = o;
    oo.reuse_prefix = reuse == 1;
    bool first = true;
    oo.on_logits = [&](std::span<const float> l) {
      if (first) logits[reuse].assign(l.begin(), l.end());
      first = false;
    };
    ChatSession s(*model_, *tokenizer_, oo, &vision());
    s.attach_image(pattern(336, 224, 1), "a.png");
    EXPECT_EQ(s.pending_images(), 1u);
    s.options().max_reply_tokens = 0;
    ChatReply r1 = s.send("What is in the picture?");
    s.options().max_reply_tokens = 2;
    EXPECT_EQ(s.pending_images(), 0u);
    EXPECT_GT(r1.prompt_tokens, pads_a);
    s.attach_image(pattern(112, 112, 2), "b.png");
    first = true;
    ChatReply r2 = s.send("And now?");
    prompt_tokens[reuse] = r2.prompt_tokens;
    ASSERT_EQ(s.messages().size(), 4u);
    EXPECT_EQ(s.messages()[0]["content"][0]["type"], "image_url");
    EXPECT_EQ(s.messages()[0]["content"][0]["image_url"]["url"], "a.png");
    EXPECT_EQ(s.messages()[2]["content"][1]["text"], "And now?");
  }
  // Without reuse the second turn prefills both images; with reuse only the second one.
  EXPECT_GT(prompt_tokens[0], pads_a + pads_b);
  EXPECT_GT(prompt_tokens[1], pads_b);
  EXPECT_LT(prompt_tokens[1], pads_a + pads_b);
  ASSERT_EQ(logits[0].size(), logits[1].size());
  ASSERT_FALSE(logits[0].empty());
  double worst = 0.0;
  for (size_t i = 0; i < logits[0].size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(logits[0][i]) - logits[1][i]));
  EXPECT_LE(worst, 1e-4);
}

// Same-size images give the same tokens; the logits differ only through the pad embeddings.
TEST_F(ChatSessionTest, ImagePixelsReachTheModel) {
  ChatSessionOptions o;
  o.max_reply_tokens = 1;
  o.thinking = false;
  std::vector<float> logits[2];
  for (int k = 0; k < 2; ++k) {
    ChatSessionOptions oo = o;
    oo.on_logits = [&, k](std::span<const float> l) { logits[k].assign(l.begin(), l.end()); };
    ChatSession s(*model_, *tokenizer_, oo, &vision());
    s.attach_image(pattern(56, 28, k + 1), "x.png");
    s.send("Describe it.");
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  EXPECT_NE(logits[0], logits[1]);
}

// An image the context cannot hold even alone (with the images already attached) is refused at
// attach time, with advice that fits the context asked for, and is not left to fail every later
// message.
TEST_F(ChatSessionTest, ImagesLargerThanTheContextAreNotAttached) {
  const int64_t pads = encode_prompt_image(vision(), pattern(112, 112, 2), "b").prompt.num_pads;
  ChatSessionOptions o;
  o.thinking = false;
  o.max_reply_tokens = 1;
  o.context = pads;  // the pads fit, the reply's token does not
  ChatSession s(*model_, *tokenizer_, o, &vision());
  const std::string err = testing::error_of([&] { s.attach_image(pattern(112, 112, 2), "b.png"); });
  EXPECT_NE(err.find("image b.png needs " + std::to_string(pads) + " tokens"), std::string::npos) << err;
  EXPECT_NE(err.find("use a larger --ctx (up to " + std::to_string(model_->text().max_position_embeddings) + ")"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("not attached"), std::string::npos) << err;
  EXPECT_EQ(s.pending_images(), 0u);
  // Room for one: a second is refused, counting the first.
  o.context = pads + 2;
  ChatSession two(*model_, *tokenizer_, o, &vision());
  two.attach_image(pattern(112, 112, 2), "b.png");
  const std::string err2 = testing::error_of([&] { two.attach_image(pattern(112, 112, 3), "c.png"); });
  EXPECT_NE(err2.find("with the 1 already attached"), std::string::npos) << err2;
  EXPECT_EQ(two.pending_images(), 1u);
  // At the model's own maximum the advice is a smaller image.
  ChatSessionOptions full = o;
  full.context = 0;
  ChatSession f(*model_, *tokenizer_, full, &vision());
  PromptImage big = encode_prompt_image(vision(), pattern(112, 112, 4), "big.png");
  big.prompt.num_pads = model_->text().max_position_embeddings;  // as many pads as the model's context
  big.rows.resize(static_cast<size_t>(big.prompt.num_pads * model_->text().hidden_size));
  const std::string e = testing::error_of([&] { f.attach_image(std::move(big)); });
  EXPECT_NE(e.find("that is the model's maximum, so use a smaller image"), std::string::npos) << e;
  EXPECT_EQ(f.pending_images(), 0u);
}

TEST_F(ChatSessionTest, ImagesNeedAVisionTower) {
  const ChatSessionOptions defaults;
  ChatSession s(*model_, *tokenizer_, defaults);
  EXPECT_THROW(s.attach_image(pattern(28, 28, 1), "x.png"), Error);
  const ojson history = ojson::parse(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])");
  EXPECT_THROW(s.send_after(history, "hi"), Error);
}

}  // namespace
}  // namespace k3
