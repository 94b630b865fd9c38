// One interactive conversation with a model (the engine behind `k3 chat`): keeps the OpenAI-style
// message list, renders it with the K3 XTML renderer, prefills only what the sequence state has
// not seen yet (the cached prefix is reused across turns), samples the reply, and streams it
// through the output parser as reasoning / content / tool-call deltas.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/generator.h"
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
};

struct ChatReply {
  ParsedChatMessage message;
  int prompt_tokens = 0;      // tokens prefilled for this turn (after prefix reuse)
  int completion_tokens = 0;
  std::string finish_reason;  // stop | length
};

class ChatSession {
 public:
  ChatSession(const Model& model, const Tokenizer& tokenizer, ChatSessionOptions options);

  ChatSessionOptions& options() { return options_; }
  // Forgets the conversation and the cached state.
  void reset();
  // Adds a user message and generates the assistant's reply; on_delta sees it as it streams.
  // Throws k3::Error (e.g. the conversation no longer fits the context); the conversation is
  // left as it was before the call.
  ChatReply send(const std::string& user_text, const std::function<void(const ChatDelta&)>& on_delta = {});
  // Replaces the conversation with `history` (no cached state) and then sends user_text.
  ChatReply send_after(const ojson& history, const std::string& user_text,
                       const std::function<void(const ChatDelta&)>& on_delta = {});
  const ojson& messages() const { return messages_; }

 private:
  std::vector<int32_t> render(const ojson& messages) const;

  const Model& model_;
  const Tokenizer& tokenizer_;
  ChatSessionOptions options_;
  ojson messages_ = ojson::array();
  SequenceState state_;
  std::vector<int32_t> consumed_;  // the tokens state_ has seen
};

}  // namespace k3
