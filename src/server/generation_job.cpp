#include "server/generation_job.h"

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <optional>
#include <random>

#include "engine/tool_constraint.h"
#include "server/api_error.h"
#include "server/stop_matcher.h"
#include "text/stream_decoder.h"

namespace k3::server {

using Clock = std::chrono::steady_clock;

std::string new_response_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id.push_back(hex[rng() & 15]);
  return id;
}

std::string dump_json(const ojson& value) { return value.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// Filled by the engine thread, drained by the HTTP thread.
struct GenerationJob::Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;  // one per token, when the request asks for them
  bool done = false;
  bool cancelled = false;  // the consumer gave up: the next token cancels the request
  RequestResult result;  // cached_tokens set at admission, the rest by on_done
  Clock::time_point arrival, last;
  bool first = true;
  ServerMetrics* metrics = nullptr;
};

// The text side of one request: tokens in, OpenAI-shaped pieces out.
struct GenerationJob::Output {
  struct Piece {
    std::string reasoning, content, text;
    std::vector<ParsedToolCall> calls;
    std::vector<int32_t> ids;
  };

  Output(Endpoint endpoint, const Tokenizer& tok, const GenerationParams& p, const ChatParserOptions& popt,
         std::vector<int32_t> stop_tokens)
      : endpoint(endpoint), tokenizer(tok), popt(popt), decoder(tok), stop_r(p.stop), stop_c(p.stop),
        stop_t(p.stop), skip_special(p.skip_special_tokens), max_calls(p.parallel_tool_calls ? INT_MAX : 1),
        stop_tokens(std::move(stop_tokens)) {
    if (endpoint == Endpoint::kChat) parser.emplace(popt, &tok);
    close_id = tok.special_id("<|close|>").value_or(-1);
    sep_id = tok.special_id("<|sep|>").value_or(-1);
  }

  bool stop_hit() const { return stop_r.matched() || stop_c.matched() || stop_t.matched(); }

  // Where the think channel closes (for usage.completion_tokens_details.reasoning_tokens).
  void track_think(int32_t tok) {
    if (think_end >= 0 || !popt.thinking || endpoint != Endpoint::kChat) return;
    if (tok == close_id) {
      after_close = true;
      tag.clear();
    } else if (after_close) {
      if (tok == sep_id) {
        if (tag == "think") think_end = completion_tokens;
        after_close = false;
      } else if (tokenizer.is_special(tok)) {
        after_close = false;
      } else {
        tag += tokenizer.token_bytes(tok);
      }
    }
  }

  void chat_delta(const ChatDelta& d, Piece& piece) {
    piece.reasoning += stop_r.push(d.reasoning);
    if (!stop_hit()) piece.content += stop_c.push(d.content);
    if (!stop_hit())
      for (const ParsedToolCall& c : d.tool_calls)
        if (static_cast<int>(calls.size() + piece.calls.size()) < max_calls) piece.calls.push_back(c);
  }

  Piece feed(int32_t tok) {
    Piece piece;
    if (stop_hit()) return piece;
    ++completion_tokens;
    piece.ids.push_back(tok);
    const bool is_stop = std::find(stop_tokens.begin(), stop_tokens.end(), tok) != stop_tokens.end();
    if (endpoint == Endpoint::kChat) {
      track_think(tok);
      chat_delta(is_stop ? parser->feed_stop_token(tok) : parser->feed_token(tok), piece);
    } else {
      if (is_stop || (skip_special && tokenizer.is_special(tok))) {
        piece.text = stop_t.push(decoder.flush());
      } else {
        piece.text = stop_t.push(decoder.push(tok));
      }
    }
    keep(piece);
    return piece;
  }

  // The end of the stream: held-back text and the final message.
  Piece finish() {
    Piece piece;
    if (endpoint == Endpoint::kChat) {
      ChatDelta last;
      ParsedChatMessage msg = parser->finish(&last);
      if (!stop_hit()) chat_delta(last, piece);
      piece.reasoning += stop_r.flush();
      piece.content += stop_c.flush();
      keep(piece);
      if (stop_hit()) {  // the message is what was emitted, cut at the stop string
        message = ParsedChatMessage{};
        if (!reasoning.empty()) message.reasoning_content = reasoning;
        const bool blank = content.find_first_not_of(" \t\r\n") == std::string::npos;
        if (!content.empty() && !(blank && !calls.empty())) message.content = content;
        message.tool_calls = calls;
      } else {
        message = std::move(msg);
        if (static_cast<int>(message.tool_calls.size()) > max_calls) message.tool_calls.resize(max_calls);
      }
    } else {
      if (!stop_hit()) piece.text = stop_t.push(decoder.flush());
      piece.text += stop_t.flush();
      keep(piece);
    }
    return piece;
  }

  void keep(const Piece& p) {
    reasoning += p.reasoning;
    content += p.content;
    text += p.text;
    calls.insert(calls.end(), p.calls.begin(), p.calls.end());
    ids.insert(ids.end(), p.ids.begin(), p.ids.end());
  }

  // The same streamed or not: the tokens up to the think channel's close, or every token when that
  // channel never closed and only reasoning came out (the parser reports an unclosed think channel
  // as reasoning, in the deltas and in the final message alike).
  int64_t reasoning_tokens() const {
    if (think_end >= 0) return think_end;
    if (popt.thinking && content.empty() && calls.empty() && !reasoning.empty()) return completion_tokens;
    return 0;
  }

  Endpoint endpoint;
  const Tokenizer& tokenizer;
  ChatParserOptions popt;
  std::optional<ChatOutputParser> parser;
  StreamDecoder decoder;
  StopMatcher stop_r, stop_c, stop_t;
  bool skip_special;
  int max_calls;
  std::vector<int32_t> stop_tokens;
  int32_t close_id = -1, sep_id = -1;
  bool after_close = false;
  std::string tag;
  int64_t think_end = -1;
  int64_t completion_tokens = 0;
  std::string reasoning, content, text;
  std::vector<ParsedToolCall> calls;
  std::vector<int32_t> ids;
  ParsedChatMessage message;
};

GenerationJob::GenerationJob(EngineHost& host, Endpoint endpoint, PreparedPrompt prompt, const GenerationParams& params,
                             const ChatParserOptions& parser_options, Clock::time_point arrival, int index,
                             const GenerationJob* first)
    : host_(host), endpoint_(endpoint), params_(params), index_(index) {
  if (!host.ready())
    throw ApiError(503, host.state() == EngineHost::State::kLoading ? "the model is still loading; retry shortly"
                                                                     : "the server is shutting down");
  scheduler_ = host.scheduler();
  const int64_t vocab = host.model().text().vocab_size;
  for (const auto& [tok, bias] : params.sampling.logit_bias)
    if (tok >= vocab)
      throw ApiError(400, cat("logit_bias names token ", tok, ", outside the vocabulary [0, ", vocab, ")"), "logit_bias");
  std::vector<int32_t> stops;
  if (!params.ignore_eos) {
    for (int id : host.model().config().stop_token_ids) stops.push_back(id);
    if (auto eos = host.tokenizer().special_id("[EOS]")) stops.push_back(*eos);
  }
  out_ = std::make_unique<Output>(endpoint, host.tokenizer(), params, parser_options, stops);
  channel_ = std::make_shared<Channel>();
  channel_->arrival = arrival;
  channel_->metrics = &host.metrics();
  prompt_tokens_ = static_cast<int64_t>(prompt.tokens.size());
  response_id_ = first ? first->response_id_ : new_response_id(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
  created_ = first ? first->created_ : static_cast<int64_t>(std::time(nullptr));

  Request r;
  r.prompt = std::move(prompt.tokens);
  r.embedding_positions = std::move(prompt.media_positions);
  r.embedding_rows = std::move(prompt.media_rows);
  r.max_tokens = params.max_tokens;
  r.sampling = params.sampling;
  // The constraints plan to close the message within what the request may generate: max_tokens,
  // capped by the context left after the prompt (engine/json_constraint.h, tool_constraint.h).
  const int64_t room = std::max<int64_t>(host.context_tokens() - prompt_tokens_, 1);
  const int64_t budget = params.max_tokens > 0 ? std::min(params.max_tokens, room) : room;
  if (!params.forced_tools.empty() && endpoint == Endpoint::kChat)
    r.constraint = std::make_shared<ChatToolConstraint>(host.vocab_index(), host.tokenizer(), parser_options.thinking,
                                                        stops, params.forced_tools, params.single_tool_call, budget);
  else if ((params.json_object || params.json_schema) && endpoint == Endpoint::kChat)
    r.constraint = std::make_shared<ChatJsonConstraint>(host.vocab_index(), host.tokenizer(), parser_options.thinking,
                                                        stops, params.json_schema, budget);
  r.stop_tokens = std::move(stops);
  r.top_logprobs = params.top_logprobs;
  if (params.top_logprobs >= 0)
    r.on_logprobs = [ch = channel_](int32_t, const TokenLogprobs& lp) {
      std::lock_guard<std::mutex> lock(ch->mu);
      ch->logprobs.push_back(lp);
    };
  r.on_token = [ch = channel_](int32_t tok) {
    const Clock::time_point now = Clock::now();
    std::lock_guard<std::mutex> lock(ch->mu);
    const double dt = std::chrono::duration<double>(now - (ch->first ? ch->arrival : ch->last)).count();
    (ch->first ? ch->metrics->ttft : ch->metrics->per_token).observe(dt);
    ch->first = false;
    ch->last = now;
    ch->tokens.push_back(tok);
    ch->cv.notify_all();
    return !ch->cancelled;
  };
  r.on_admitted = [ch = channel_](int64_t cached) {
    std::lock_guard<std::mutex> lock(ch->mu);
    ch->result.cached_tokens = cached;  // a stop string can end the reply before on_done
  };
  r.on_done = [ch = channel_](const RequestResult& res) {
    std::lock_guard<std::mutex> lock(ch->mu);
    ch->result = res;
    ch->done = true;
    ch->cv.notify_all();
  };
  try {
    id_ = scheduler_->submit(std::move(r));
  } catch (const SchedulerBusy& e) {
    if (host.ready()) throw ApiError(429, e.what(), "", "queue_full");
    throw ApiError(503, "the server is shutting down");
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "max_tokens");
  }
}

GenerationJob::~GenerationJob() {
  bool done;
  {
    std::lock_guard<std::mutex> lock(channel_->mu);
    channel_->cancelled = true;
    done = channel_->done;
  }
  if (!done && scheduler_) scheduler_->cancel(id_);
  if (!finished_) host_.metrics().count_finish("cancelled");
}

void GenerationJob::withdraw() {
  finished_ = true;  // the destructor cancels it without counting it
}

bool GenerationJob::wait(std::vector<int32_t>& tokens, int timeout_ms) {
  std::unique_lock<std::mutex> lock(channel_->mu);
  channel_->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                        [&] { return channel_->done || !channel_->tokens.empty(); });
  tokens.insert(tokens.end(), channel_->tokens.begin(), channel_->tokens.end());
  channel_->tokens.clear();
  lp_in_.insert(lp_in_.end(), std::make_move_iterator(channel_->logprobs.begin()),
                std::make_move_iterator(channel_->logprobs.end()));
  channel_->logprobs.clear();
  return channel_->done;
}

void GenerationJob::note_fed(int32_t tok, bool kept) {
  if (params_.top_logprobs < 0 || lp_in_.empty()) return;
  if (kept) lp_unsent_.emplace_back(tok, std::move(lp_in_.front()));
  lp_in_.pop_front();
}

ojson GenerationJob::take_logprobs() {
  if (params_.top_logprobs < 0) return nullptr;
  const Tokenizer& tk = host_.tokenizer();
  const auto bytes_of = [&](int32_t id) {
    ojson b = ojson::array();
    for (unsigned char c : tk.token_bytes(id)) b.push_back(static_cast<int>(c));
    return b;
  };
  const auto text_of = [&](int32_t id) { return tk.decode(std::span<const int32_t>(&id, 1)); };
  ojson out;
  if (endpoint_ == Endpoint::kChat) {
    ojson content = ojson::array();
    for (const auto& [id, lp] : lp_unsent_) {
      ojson top = ojson::array();
      for (const auto& [t, l] : lp.top) top.push_back({{"token", text_of(t)}, {"logprob", l}, {"bytes", bytes_of(t)}});
      content.push_back({{"token", text_of(id)}, {"logprob", lp.logprob}, {"bytes", bytes_of(id)}, {"top_logprobs", top}});
    }
    out = {{"content", content}};
  } else {
    ojson tokens = ojson::array(), values = ojson::array(), tops = ojson::array(), offsets = ojson::array();
    for (const auto& [id, lp] : lp_unsent_) {
      const std::string text = text_of(id);
      tokens.push_back(text);
      values.push_back(lp.logprob);
      ojson top = ojson::object();
      for (const auto& [t, l] : lp.top) top[text_of(t)] = l;
      tops.push_back(top);
      offsets.push_back(text_offset_);
      for (unsigned char c : text) text_offset_ += (c & 0xC0) != 0x80;  // characters, as Python's len()
    }
    out = {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
  }
  lp_unsent_.clear();
  return out;
}

ojson GenerationJob::usage(const RequestResult& result) const {
  ojson u = ojson::object();
  u["prompt_tokens"] = prompt_tokens_;
  u["completion_tokens"] = out_->completion_tokens;
  u["total_tokens"] = prompt_tokens_ + out_->completion_tokens;
  u["prompt_tokens_details"] = {{"cached_tokens", result.cached_tokens}};
  if (endpoint_ == Endpoint::kChat)
    u["completion_tokens_details"] = {{"reasoning_tokens", out_->reasoning_tokens()}};
  return u;
}

ojson GenerationJob::chunk_base() const {
  ojson c = ojson::object();
  c["id"] = response_id_;
  c["object"] = endpoint_ == Endpoint::kChat ? "chat.completion.chunk" : "text_completion";
  c["created"] = created_;
  c["model"] = host_.options().served_name;
  return c;
}

namespace {

// The finish_reason for a request that ended (`ended`) with `result`, or stopped on a string.
std::string finish_reason(bool stop_hit, const RequestResult& result, bool has_calls) {
  if (stop_hit) return "stop";
  if (result.reason == FinishReason::kLength) return "length";
  return has_calls ? "tool_calls" : "stop";
}

}  // namespace

std::optional<ojson> GenerationJob::run(const std::function<bool()>& client_gone) {
  std::vector<int32_t> tokens;
  bool ended = false;
  while (!ended && !out_->stop_hit()) {
    ended = wait(tokens, client_gone ? 200 : 1000);
    if (!ended && client_gone && client_gone()) return std::nullopt;  // ~GenerationJob cancels it
    for (int32_t t : tokens) {
      note_fed(t, !out_->feed(t).ids.empty());
      if (out_->stop_hit()) break;
    }
    tokens.clear();
  }
  out_->finish();
  RequestResult result;
  {
    std::lock_guard<std::mutex> lock(channel_->mu);
    result = channel_->result;
  }
  finished_ = true;
  if (!out_->stop_hit() && result.reason == FinishReason::kError) {
    host_.metrics().count_finish("error");
    throw ApiError(500, cat("generation failed: ", result.error));
  }
  if (!out_->stop_hit() && result.reason == FinishReason::kCancelled) {
    host_.metrics().count_finish("cancelled");
    throw ApiError(503, "the request was cancelled: the server is shutting down");
  }
  const std::string reason = finish_reason(out_->stop_hit(), result,
                                           endpoint_ == Endpoint::kChat && !out_->message.tool_calls.empty());
  host_.metrics().count_finish(reason);
  ojson body = chunk_base();
  ojson choice = ojson::object();
  choice["index"] = index_;
  if (endpoint_ == Endpoint::kChat) {
    body["object"] = "chat.completion";
    choice["message"] = out_->message.to_openai();
  } else {
    choice["text"] = out_->text;
    if (params_.return_token_ids) choice["token_ids"] = out_->ids;
  }
  choice["logprobs"] = take_logprobs();
  choice["finish_reason"] = reason;
  body["choices"] = ojson::array({choice});
  final_usage_ = usage(result);
  body["usage"] = final_usage_;
  return body;
}

bool GenerationJob::stream(const std::function<bool(std::string_view)>& write, bool whole) {
  const bool chat = endpoint_ == Endpoint::kChat;
  int next_call_index = 0;
  const auto event = [&](const ojson& v) { return write(cat("data: ", dump_json(v), "\n\n")); };
  const auto chunk = [&](ojson delta_or_text, const std::vector<int32_t>* ids, const ojson& reason) {
    ojson c = chunk_base();
    ojson choice = ojson::object();
    choice["index"] = index_;
    if (chat)
      choice["delta"] = std::move(delta_or_text);
    else
      choice["text"] = std::move(delta_or_text);
    if (!chat && ids && params_.return_token_ids) choice["token_ids"] = *ids;
    choice["logprobs"] = lp_unsent_.empty() ? ojson(nullptr) : take_logprobs();
    choice["finish_reason"] = reason;
    c["choices"] = ojson::array({choice});
    if (params_.include_usage) c["usage"] = nullptr;
    return event(c);
  };
  const auto send_piece = [&](const Output::Piece& p) {
    if (chat) {
      if (!p.reasoning.empty() && !chunk(ojson{{"reasoning_content", p.reasoning}}, nullptr, nullptr)) return false;
      if (!p.content.empty() && !chunk(ojson{{"content", p.content}}, nullptr, nullptr)) return false;
      for (const ParsedToolCall& c : p.calls) {
        ojson call = {{"index", next_call_index++},
                      {"id", c.id},
                      {"type", "function"},
                      {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
        if (!chunk(ojson{{"tool_calls", ojson::array({call})}}, nullptr, nullptr)) return false;
      }
      return true;
    }
    if (p.text.empty() && (p.ids.empty() || !params_.return_token_ids)) return true;
    return chunk(p.text, &p.ids, nullptr);
  };
  const auto gone = [&] {
    finished_ = true;
    host_.metrics().count_finish("cancelled");
    return false;  // ~GenerationJob cancels the request
  };

  if (chat && !chunk(ojson{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr)) return gone();
  std::vector<int32_t> tokens;
  bool ended = false;
  Clock::time_point last_write = Clock::now();
  while (!ended && !out_->stop_hit()) {
    ended = wait(tokens, 250);
    for (int32_t t : tokens) {
      const Output::Piece piece = out_->feed(t);
      note_fed(t, !piece.ids.empty());
      if (!send_piece(piece)) return gone();
      last_write = Clock::now();
      if (out_->stop_hit()) break;
    }
    if (tokens.empty() && !ended && Clock::now() - last_write > std::chrono::seconds(1)) {
      // An SSE comment while the request waits: finds clients that went away.
      if (!write(": waiting\n\n")) return gone();
      last_write = Clock::now();
    }
    tokens.clear();
  }
  if (!send_piece(out_->finish())) return gone();
  RequestResult result;
  {
    std::lock_guard<std::mutex> lock(channel_->mu);
    result = channel_->result;
  }
  finished_ = true;
  if (!out_->stop_hit() && (result.reason == FinishReason::kError || result.reason == FinishReason::kCancelled)) {
    const bool error = result.reason == FinishReason::kError;
    host_.metrics().count_finish(error ? "error" : "cancelled");
    const ojson e = error ? error_envelope(500, cat("generation failed: ", result.error))
                          : error_envelope(503, "the request was cancelled: the server is shutting down");
    if (!event(e)) return false;
    return !whole || write("data: [DONE]\n\n");
  }
  const std::string reason = finish_reason(out_->stop_hit(), result, chat && !out_->message.tool_calls.empty());
  host_.metrics().count_finish(reason);
  final_usage_ = usage(result);
  if (!chunk(chat ? ojson::object() : ojson(""), nullptr, reason)) return false;
  if (!whole) return true;
  if (params_.include_usage && !write_usage_chunk(write, final_usage_)) return false;
  return write("data: [DONE]\n\n");
}

bool GenerationJob::write_usage_chunk(const std::function<bool(std::string_view)>& write, const ojson& usage) const {
  ojson c = chunk_base();
  c["choices"] = ojson::array();
  c["usage"] = usage;
  return write(cat("data: ", dump_json(c), "\n\n"));
}

}  // namespace k3::server
