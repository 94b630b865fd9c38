// One generation request from its prepared prompt to the OpenAI response.  The constructor
// submits it to the scheduler; the engine thread only pushes token ids into the job's channel
// (and records latencies), and the HTTP thread turns them into text:
//   chat:        ChatOutputParser (reasoning / content / tool calls) -> stop strings per channel;
//   completion:  StreamDecoder (incremental UTF-8, special tokens as text unless skipped) -> stop
//                strings.
// A stop string or a client that goes away cancels the request in the scheduler, which frees its
// slot at the next step.  finish_reason: "stop" (stop token or string), "length" (max_tokens or
// the context), "tool_calls" (the message carries tool calls).
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "server/engine_host.h"
#include "server/generation_params.h"
#include "server/prompt_builder.h"

namespace k3::server {

class GenerationJob {
 public:
  // Throws ApiError: 400 for a request the scheduler refuses, 429 when its queue is full, 503
  // while loading or shutting down.
  // index: the choice's index (n > 1); first: the request's first choice, whose response id and
  // creation time the others share.
  GenerationJob(EngineHost& host, Endpoint endpoint, PreparedPrompt prompt, const GenerationParams& params,
                const ChatParserOptions& parser_options, std::chrono::steady_clock::time_point arrival, int index = 0,
                const GenerationJob* first = nullptr);
  // Cancels the request if it is still running (counted as finished "cancelled").
  ~GenerationJob();
  GenerationJob(const GenerationJob&) = delete;
  GenerationJob& operator=(const GenerationJob&) = delete;

  // Waits for the end and returns the chat.completion / text_completion body.  Throws ApiError
  // 500 when the engine failed, 503 when it shut down.  client_gone (optional) is asked a few
  // times a second; once it says true the request is cancelled and run() returns nothing.
  std::optional<ojson> run(const std::function<bool()>& client_gone = {});
  // Writes the SSE events ("data: {...}\n\n" ... "data: [DONE]\n\n") through `write`; false from
  // write means the client went away: the request is cancelled and stream() returns false.
  // whole = false (one of n choices): no usage chunk and no [DONE]; the caller writes them once.
  bool stream(const std::function<bool(std::string_view)>& write, bool whole = true);
  // Takes back a choice whose sibling was refused (n > 1 and the queue filled part-way): the
  // destructor still cancels it, but does not count it as a cancelled request, since the HTTP
  // request is answered (and counted) as refused.
  void withdraw();
  // The usage object once run() or stream() finished normally (else null).
  const ojson& final_usage() const { return final_usage_; }
  // The closing usage chunk of a stream ("data: {...choices: [], usage}\n\n").
  bool write_usage_chunk(const std::function<bool(std::string_view)>& write, const ojson& usage) const;

 private:
  struct Channel;
  struct Output;

  // Blocks until tokens or the end arrive; appends the tokens.  True when the request ended.
  bool wait(std::vector<int32_t>& tokens, int timeout_ms);
  // After out_->feed(tok): keeps tok's logprobs for the next response piece when the token went
  // into the output (`kept`), drops them when it came after a stop.
  void note_fed(int32_t tok, bool kept);
  // The logprobs object for the tokens fed since the last call (chat: {"content": [...]};
  // completions: tokens / token_logprobs / top_logprobs / text_offset); null without logprobs.
  ojson take_logprobs();
  // The OpenAI usage object; prompt_tokens_details.cached_tokens from the prefix cache.
  ojson usage(const RequestResult& result) const;
  ojson chunk_base() const;

  EngineHost& host_;
  Endpoint endpoint_;
  GenerationParams params_;
  std::shared_ptr<Scheduler> scheduler_;
  std::shared_ptr<Channel> channel_;
  std::unique_ptr<Output> out_;
  uint64_t id_ = 0;
  bool finished_ = false;
  std::string response_id_;
  int64_t created_ = 0;
  int64_t prompt_tokens_ = 0;
  int index_ = 0;
  ojson final_usage_;
  std::deque<TokenLogprobs> lp_in_;                              // received, not fed yet
  std::vector<std::pair<int32_t, TokenLogprobs>> lp_unsent_;     // fed, not in a response yet
  int64_t text_offset_ = 0;                                      // completions' text_offset
};

// "chatcmpl-…" / "cmpl-…" with 24 random hex digits.
std::string new_response_id(const char* prefix);
// JSON text for the wire (invalid UTF-8, which should not occur, is replaced).
std::string dump_json(const ojson& value);

}  // namespace k3::server
