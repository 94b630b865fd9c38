// One interactive conversation with a model (the engine behind `k3 chat`): keeps the OpenAI-style
// message list, renders it with the K3 XTML renderer, prefills only what the sequence state has
// not seen yet (the cached prefix is reused across turns), samples the reply, and streams it
// through the output parser as reasoning / content / tool-call deltas.
//
// Images (with a vision tower): attach_image() encodes an image at once and attaches it to the
// next user message, whose content becomes parts (the images, then the text); the renderer puts
// each image's media prompt in its place and the prefill overwrites the <|media_pad|> embeddings
// with the image's projector rows.  Prefix reuse compares every cached token together with its
// embedding source (which image row, for pads), so reused state is exactly what a fresh prefill
// of the whole conversation would compute.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "engine/multimodal.h"
#include "model/k3_model.h"
#include "text/chat_output_parser.h"
#include "text/chat_request.h"
#include "text/tokenizer.h"

namespace k3 {

struct ChatSessionOptions {
  SamplingParams sampling;
  int max_reply_tokens = 1024;
  int64_t context = 0;  // 0: the model's limit
  bool thinking = true;
  std::string effort = "max";  // low | high | max
  bool reuse_prefix = true;     // false: every turn prefills the whole conversation again
  // Sees the logits each reply token is sampled from (GenerateOptions::on_logits).
  std::function<void(std::span<const float>)> on_logits;
};

struct ChatReply {
  ParsedChatMessage message;
  int prompt_tokens = 0;      // tokens prefilled for this turn (after prefix reuse)
  int completion_tokens = 0;
  std::string finish_reason;  // stop | length
  bool context_full = false;  // length because prompt + reply filled the context (not max_reply_tokens)
};

class ChatSession {
 public:
  // vision: the model's vision tower (engine/multimodal.h load_vision_for), or null for text only.
  ChatSession(const Model& model, const Tokenizer& tokenizer, ChatSessionOptions options,
              const VisionModel* vision = nullptr);

  ChatSessionOptions& options() { return options_; }
  // Forgets the conversation, attached images and the cached state.
  void reset();
  // Encodes `image` now and attaches it to the next user message; `source` names it in the
  // message (an image_url part).  Throws k3::Error without a vision tower or for a bad image.
  const PromptImage& attach_image(const Image& image, const std::string& source);
  // The same for an already encoded image (encode_prompt_image).  Both refuse an image whose
  // tokens (with those already attached) cannot fit the context.
  const PromptImage& attach_image(PromptImage image);
  size_t pending_images() const { return pending_.size(); }
  void clear_pending_images() { pending_.clear(); }
  // Adds a user message and generates the assistant's reply; on_delta sees it as it streams.
  // Throws k3::Error (e.g. the conversation no longer fits the context); the conversation is
  // left as it was before the call.
  ChatReply send(const std::string& user_text, const std::function<void(const ChatDelta&)>& on_delta = {});
  // Replaces the conversation with `history` (no cached state) and then sends user_text.
  ChatReply send_after(const ojson& history, const std::string& user_text,
                       const std::function<void(const ChatDelta&)>& on_delta = {});
  const ojson& messages() const { return messages_; }

 private:
  std::vector<int32_t> render(const ojson& messages, const std::vector<const PromptImage*>& images) const;
  // What to do about an image the context cannot hold: a larger --ctx, or (at the model's
  // maximum) a smaller image.
  std::string larger_context_advice() const;

  const Model& model_;
  const Tokenizer& tokenizer_;
  ChatSessionOptions options_;
  const VisionModel* vision_ = nullptr;
  ojson messages_ = ojson::array();
  // The conversation's images in order (with ids: embedding sources), and those not sent yet.
  std::vector<std::pair<int64_t, PromptImage>> images_;
  std::vector<PromptImage> pending_;
  int64_t next_image_id_ = 0;
  SequenceState state_;
  std::vector<int32_t> consumed_;       // the tokens state_ has seen
  std::vector<int64_t> consumed_from_;  // per token: -1 (token embedding) or image id << 32 | row
};

}  // namespace k3
