#include "engine/chat_session.h"

#include <algorithm>

#include "base/error.h"
#include "text/xtml_renderer.h"
#include "text/xtml_writer.h"

namespace k3 {

namespace {

// Image parts anywhere in the messages' contents.
size_t count_image_parts(const ojson& messages) {
  size_t n = 0;
  for (const ojson& m : messages)
    if (m.is_object() && m.contains("content") && m["content"].is_array())
      for (const ojson& part : m["content"])
        if (part.is_object() && part.contains("type") && (part["type"] == "image_url" || part["type"] == "image")) ++n;
  return n;
}

}  // namespace

ChatSession::ChatSession(const Model& model, const Tokenizer& tokenizer, ChatSessionOptions options,
                         const VisionModel* vision)
    : model_(model), tokenizer_(tokenizer), options_(std::move(options)), vision_(vision) {
  validate(options_.sampling);
  reset();
}

void ChatSession::reset() {
  messages_ = ojson::array();
  images_.clear();
  pending_.clear();
  state_ = model_.new_sequence(options_.context);
  consumed_.clear();
  consumed_from_.clear();
}

const PromptImage& ChatSession::attach_image(const Image& image, const std::string& source) {
  K3_CHECK(vision_ != nullptr, "this chat has no vision tower, so it cannot take images");
  return attach_image(encode_prompt_image(*vision_, image, source));
}

const PromptImage& ChatSession::attach_image(PromptImage image) {
  K3_CHECK(vision_ != nullptr, "this chat has no vision tower, so it cannot take images");
  K3_CHECK(static_cast<int64_t>(image.rows.size()) == image.prompt.num_pads * model_.text().hidden_size,
           "image ", image.source, ": ", image.rows.size(), " embedding values for ", image.prompt.num_pads,
           " pads of width ", model_.text().hidden_size);
  // An image that cannot fit even an empty conversation is refused now, not attached to fail
  // every later message.
  int64_t tokens = image.prompt.num_pads + 1;  // its pads and at least the reply's first token
  for (const PromptImage& p : pending_) tokens += p.prompt.num_pads;
  if (tokens > state_.max_tokens())
    fail("image ", image.source, " needs ", image.prompt.num_pads, " tokens",
         pending_.empty() ? std::string() : cat(" (with the ", pending_.size(), " already attached: ", tokens - 1, ")"),
         " but the context holds ", state_.max_tokens(), " tokens; ", larger_context_advice(), "; not attached");
  pending_.push_back(std::move(image));
  return pending_.back();
}

std::string ChatSession::larger_context_advice() const {
  const int64_t model_max = model_.text().max_position_embeddings;
  if (state_.max_tokens() < model_max) return cat("use a larger --ctx (up to ", model_max, ")");
  return cat("that is the model's maximum, so use a smaller image");
}

std::vector<int32_t> ChatSession::render(const ojson& messages, const std::vector<const PromptImage*>& images) const {
  ChatOptions o;
  o.thinking = options_.thinking;
  if (options_.thinking) o.thinking_effort = options_.effort;
  if (!images.empty()) {
    o.image_prompts.emplace();
    for (const PromptImage* im : images) o.image_prompts->push_back(im->prompt.text);
  }
  return encode_segments(tokenizer_, render_chat(messages, ojson(), o));
}

ChatReply ChatSession::send(const std::string& user_text, const std::function<void(const ChatDelta&)>& on_delta) {
  ojson messages = messages_;
  // The conversation's images, then this message's: ids, in prompt order.
  std::vector<const PromptImage*> images;
  std::vector<int64_t> image_ids;
  for (const auto& [id, im] : images_) {
    images.push_back(&im);
    image_ids.push_back(id);
  }
  if (pending_.empty()) {
    messages.push_back(ojson{{"role", "user"}, {"content", user_text}});
  } else {
    ojson parts = ojson::array();
    for (const PromptImage& im : pending_) {
      parts.push_back(ojson{{"type", "image_url"}, {"image_url", {{"url", im.source}}}});
      images.push_back(&im);
      image_ids.push_back(next_image_id_ + static_cast<int64_t>(image_ids.size() - images_.size()));
    }
    if (!user_text.empty()) parts.push_back(ojson{{"type", "text"}, {"text", user_text}});
    messages.push_back(ojson{{"role", "user"}, {"content", parts}});
  }
  const std::vector<int32_t> prompt = render(messages, images);

  // Where each prompt token's embedding comes from: the token table, or a row of an image.
  const int32_t pad = images.empty() ? -1 : media_pad_id(model_, tokenizer_);
  std::vector<int64_t> from(prompt.size(), -1);
  std::vector<float> rows;  // every image's rows in prompt order
  {
    size_t img = 0;
    int64_t row = 0;
    for (size_t i = 0; i < prompt.size(); ++i) {
      if (pad < 0 || prompt[i] != pad) continue;
      while (img < images.size() && row == images[img]->prompt.num_pads) ++img, row = 0;
      K3_CHECK(img < images.size(), "the prompt has more image pad tokens than its images have rows");
      from[i] = (image_ids[img] << 32) | row++;
    }
    for (const PromptImage* im : images) rows.insert(rows.end(), im->rows.begin(), im->rows.end());
  }

  // Reuse the longest prefix the state has already consumed (same tokens from the same
  // embeddings); otherwise start over.
  size_t common = 0;
  if (options_.reuse_prefix)
    while (common < consumed_.size() && common < prompt.size() && consumed_[common] == prompt[common] &&
           consumed_from_[common] == from[common])
      ++common;
  if (common < consumed_.size() || common == prompt.size()) {
    state_ = model_.new_sequence(options_.context);
    consumed_.clear();
    consumed_from_.clear();
    common = 0;
  }
  const std::vector<int32_t> todo(prompt.begin() + static_cast<int64_t>(common), prompt.end());
  int64_t rows_before = 0;  // image rows already in the reused prefix
  for (size_t i = 0; i < common; ++i) rows_before += from[i] >= 0 ? 1 : 0;
  const int64_t hidden = model_.text().hidden_size;
  std::vector<EmbeddingOverride> overrides;
  if (pad >= 0)
    overrides = media_embedding_overrides(todo, pad, std::span<const float>(rows).subspan(rows_before * hidden), hidden);
  if (state_.position() + static_cast<int64_t>(todo.size()) + 1 > state_.max_tokens()) {
    // A first turn that does not fit cannot be helped by /reset (the chat format's own system
    // prompt alone may exceed a small --ctx).
    if (messages.size() <= 1)
      fail("this message needs ", prompt.size() + 1, " tokens of context (", prompt.size(), " for the prompt",
           rows.empty() ? std::string() : cat(", ", rows.size() / hidden, " of them for images"),
           ", 1 for the reply) but the context is ", state_.max_tokens(), " tokens; ",
           state_.max_tokens() < model_.text().max_position_embeddings
               ? cat("use a larger --ctx (up to ", model_.text().max_position_embeddings, ")")
               : std::string("that is the model's maximum, so send a shorter message or smaller images"));
    fail("the conversation (", prompt.size(), " tokens",
         rows.empty() ? std::string() : cat(", ", rows.size() / hidden, " of them for images"),
         ") no longer fits the context of ", state_.max_tokens(), " tokens; use /reset");
  }

  ChatParserOptions popt;
  popt.thinking = options_.thinking;
  ChatOutputParser parser(popt, &tokenizer_);
  GenerateOptions gopt;
  gopt.max_tokens = options_.max_reply_tokens;
  gopt.sampling = options_.sampling;
  gopt.prompt_embeddings = overrides;
  gopt.on_logits = options_.on_logits;
  for (int id : model_.config().stop_token_ids) gopt.stop_tokens.push_back(id);
  if (auto eos = tokenizer_.special_id("[EOS]")) gopt.stop_tokens.push_back(*eos);

  ChatReply reply;
  reply.prompt_tokens = static_cast<int>(todo.size());
  bool stopped = false;
  std::vector<int32_t> generated;
  try {
    generated = generate(model_, state_, todo, gopt, [&](int32_t tok) {
      stopped = std::find(gopt.stop_tokens.begin(), gopt.stop_tokens.end(), tok) != gopt.stop_tokens.end();
      ChatDelta d = stopped ? parser.feed_stop_token(tok) : parser.feed_token(tok);
      if (on_delta && !d.empty()) on_delta(d);
      return true;
    });
  } catch (...) {
    state_ = model_.new_sequence(options_.context);  // the state may be half-advanced
    consumed_.clear();
    consumed_from_.clear();
    throw;
  }
  ChatDelta last;
  reply.message = parser.finish(&last);
  if (on_delta && !last.empty()) on_delta(last);
  reply.completion_tokens = static_cast<int>(generated.size());
  reply.finish_reason = stopped ? "stop" : "length";
  reply.context_full = !stopped && static_cast<int>(generated.size()) < options_.max_reply_tokens;
  consumed_ = prompt;
  consumed_from_ = std::move(from);
  // The state consumed every generated token except the last one sampled.
  if (!generated.empty()) {
    consumed_.insert(consumed_.end(), generated.begin(), generated.end() - 1);
    consumed_from_.resize(consumed_.size(), -1);
  }
  messages.push_back(reply.message.to_openai());
  messages_ = std::move(messages);
  for (PromptImage& im : pending_) images_.emplace_back(next_image_id_++, std::move(im));
  pending_.clear();
  return reply;
}

ChatReply ChatSession::send_after(const ojson& history, const std::string& user_text,
                                  const std::function<void(const ChatDelta&)>& on_delta) {
  K3_CHECK(history.is_array(), "chat history must be a list of messages");
  K3_CHECK(count_image_parts(history) == 0,
           "chat history with images is not supported here; attach images with attach_image before sending");
  std::vector<PromptImage> pending = std::move(pending_);
  reset();
  pending_ = std::move(pending);
  messages_ = history;
  return send(user_text, on_delta);
}

}  // namespace k3
