#include "engine/chat_session.h"

#include <algorithm>

#include "base/error.h"
#include "text/xtml_renderer.h"
#include "text/xtml_writer.h"

namespace k3 {

ChatSession::ChatSession(const Model& model, const Tokenizer& tokenizer, ChatSessionOptions options)
    : model_(model), tokenizer_(tokenizer), options_(std::move(options)) {
  validate(options_.sampling);
  reset();
}

void ChatSession::reset() {
  messages_ = ojson::array();
  state_ = model_.new_sequence(options_.context);
  consumed_.clear();
}

std::vector<int32_t> ChatSession::render(const ojson& messages) const {
  ChatOptions o;
  o.thinking = options_.thinking;
  if (options_.thinking) o.thinking_effort = options_.effort;
  return encode_segments(tokenizer_, render_chat(messages, ojson(), o));
}

ChatReply ChatSession::send(const std::string& user_text, const std::function<void(const ChatDelta&)>& on_delta) {
  ojson messages = messages_;
  messages.push_back(ojson{{"role", "user"}, {"content", user_text}});
  const std::vector<int32_t> prompt = render(messages);

  // Reuse the longest prefix the state has already consumed; otherwise start over.
  size_t common = 0;
  while (common < consumed_.size() && common < prompt.size() && consumed_[common] == prompt[common]) ++common;
  if (common < consumed_.size() || common == prompt.size()) {
    state_ = model_.new_sequence(options_.context);
    consumed_.clear();
    common = 0;
  }
  const std::vector<int32_t> todo(prompt.begin() + static_cast<int64_t>(common), prompt.end());
  if (state_.position() + static_cast<int64_t>(todo.size()) + 1 > state_.max_tokens())
    fail("the conversation (", prompt.size(), " tokens) no longer fits the context of ", state_.max_tokens(),
         " tokens; use /reset");

  ChatParserOptions popt;
  popt.thinking = options_.thinking;
  ChatOutputParser parser(popt, &tokenizer_);
  GenerateOptions gopt;
  gopt.max_tokens = options_.max_reply_tokens;
  gopt.sampling = options_.sampling;
  for (int id : model_.config().stop_token_ids) gopt.stop_tokens.push_back(id);
  if (auto eos = tokenizer_.special_id("[EOS]")) gopt.stop_tokens.push_back(*eos);

  ChatReply reply;
  reply.prompt_tokens = static_cast<int>(todo.size());
  bool stopped = false;
  std::vector<int32_t> generated;
  try {
    generated = generate(model_, state_, todo, gopt, [&](int32_t tok) {
      stopped = std::find(gopt.stop_tokens.begin(), gopt.stop_tokens.end(), tok) != gopt.stop_tokens.end();
      ChatDelta d = parser.feed_token(tok);
      if (on_delta && !d.empty()) on_delta(d);
      return true;
    });
  } catch (...) {
    state_ = model_.new_sequence(options_.context);  // the state may be half-advanced
    consumed_.clear();
    throw;
  }
  ChatDelta last;
  reply.message = parser.finish(&last);
  if (on_delta && !last.empty()) on_delta(last);
  reply.completion_tokens = static_cast<int>(generated.size());
  reply.finish_reason = stopped ? "stop" : "length";
  consumed_ = prompt;
  // The state consumed every generated token except the last one sampled.
  if (!generated.empty()) consumed_.insert(consumed_.end(), generated.begin(), generated.end() - 1);
  messages.push_back(reply.message.to_openai());
  messages_ = std::move(messages);
  return reply;
}

ChatReply ChatSession::send_after(const ojson& history, const std::string& user_text,
                                  const std::function<void(const ChatDelta&)>& on_delta) {
  K3_CHECK(history.is_array(), "chat history must be a list of messages");
  reset();
  messages_ = history;
  return send(user_text, on_delta);
}

}  // namespace k3
