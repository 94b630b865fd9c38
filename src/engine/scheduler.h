// The continuous-batching engine loop the server sits on.  A background thread admits
// requests from a bounded FIFO queue into at most max_batch sequence slots (while the global
// state-memory budget allows), prefills prompts in chunks under a per-step token budget,
// and runs the decode steps of all running sequences -- together with any prefill chunks -- in
// one Model::forward call per step.  Results equal k3::generate run alone with
// GenerateOptions::prefill_chunk == SchedulerOptions::prefill_chunk (bit-identical logits:
// each sequence sees the same chunk boundaries, and batching does not change a sequence).
// Deep in a long prompt a step may take several chunks of one sequence at once
// (prefill_chunk_max, engine/prefill_schedule.h), only where that changes no bit.
//
// Prompt-prefix cache (SchedulerOptions::prefix_cache_bytes > 0): after the last prefill chunk
// boundary inside each prompt (the largest multiple of prefill_chunk below its length), and
// after the last boundary before the point where the prompt leaves the longest prefix it shares
// with a cached one (so a shared system prompt is stored at its second use), the sequence
// state is copied into a PrefixCache; a later request whose prompt starts with a cached
// prefix (and its image rows) starts from that copy.  Only chunk boundaries are stored, where a
// cold run's next chunk starts too, so a cache hit changes nothing in the results: they stay
// bit-identical to a lone run.  A request whose prompt starts with the prompt prefix that a
// running sequence is still prefilling waits for that sequence to store it (n > 1 choices, or
// users with one system prompt at once, prefill it once).  Cached states need memory beyond
// memory_budget, up to their own budget.
//
// Errors: submit() throws SchedulerBusy (a k3::Error) when the queue is full or the scheduler is
// shut down -- the server maps it to 429/503 -- and plain k3::Error for an invalid request (400), naming the field.
// Callbacks run on the engine thread, never under the scheduler's lock, so they may call
// cancel() and stats(); a slow callback slows every running request.  A request may replace the
// embeddings of some prompt tokens (images); they are applied in whichever prefill chunk holds
// each position.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "base/error.h"
#include "engine/prefill_schedule.h"
#include "engine/prefix_cache.h"
#include "engine/sampler.h"
#include "engine/token_constraint.h"
#include "model/k3_model.h"

namespace k3 {

inline constexpr int kMaxTopLogprobs = 20;

// Thrown by Scheduler::submit when the waiting queue is full (retry later: HTTP 429/503).
class SchedulerBusy : public Error {
 public:
  using Error::Error;
};

enum class FinishReason { kStop, kLength, kCancelled, kError };
// "stop", "length", "cancelled", "error".
const char* to_string(FinishReason reason);

struct RequestResult {
  FinishReason reason = FinishReason::kStop;
  std::string error;              // the message when reason == kError (or why it was cancelled)
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // tokens sampled and handed to the callbacks (the last may be one whose callback threw)
  int64_t cached_tokens = 0;      // prompt tokens taken from the prefix cache, not prefilled
};

// A generated token's log-probability under the model's raw distribution (log-softmax of the
// logits, before logit_bias, penalties and temperature: vLLM's default), and the most likely
// tokens with theirs, most likely first (lowest id on ties).
struct TokenLogprobs {
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
};

// The log-softmax of logits[0, vocab) at `token`, and the `top` most likely tokens.
TokenLogprobs token_logprobs(const float* logits, int64_t vocab, int32_t token, int top);

struct Request {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16;  // new tokens; 0 = until the context is full
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one of these
  // Embedding overrides for prompt tokens (an image's <|media_pad|> rows): strictly increasing
  // prompt positions, and their rows, hidden_size floats each, in the same order.
  std::vector<int64_t> embedding_positions;
  std::vector<float> embedding_rows;
  // Each generated token; return false to cancel (client disconnect).  Optional.
  std::function<bool(int32_t token)> on_token;
  // top_logprobs >= 0 (at most kMaxTopLogprobs): on_logprobs sees each generated token's
  // TokenLogprobs with that many alternatives, just before on_token sees the token.
  int top_logprobs = -1;
  std::function<void(int32_t token, const TokenLogprobs&)> on_logprobs;
  // Constrained decoding (e.g. ChatJsonConstraint): masks the logits before every sample and
  // follows the sampled tokens.  Logprobs stay those of the raw logits.  Optional.
  std::shared_ptr<TokenConstraint> constraint;
  // Called once when the request's sequence is set up in a slot, before any token, with the
  // prompt tokens restored from the prefix cache (RequestResult::cached_tokens, known before
  // on_done: a consumer that stops on a string reports it without waiting for the end); not
  // called when the setup fails (on_done then reports the error).  Optional.
  std::function<void(int64_t cached_tokens)> on_admitted;
  // Called exactly once per accepted request, last.  Optional.
  std::function<void(const RequestResult&)> on_done;
};

struct SchedulerOptions {
  int max_batch = 8;              // sequence slots
  size_t max_queue = 64;          // waiting requests beyond which submit throws SchedulerBusy
  int64_t prefill_chunk = 256;    // prompt tokens per sequence per forward call, the segments' grid
  int64_t prefill_chunk_max = 0;  // deep in a long prompt, segments up to this long (prefill_schedule.h);
                                  // 0 or <= prefill_chunk: always one chunk
  int64_t step_prefill_tokens = 256;  // prompt tokens per step over all sequences (>= 1 chunk runs)
  int64_t max_context = 0;        // per-request context (prompt + output); 0 = max_position_embeddings
  uint64_t memory_budget = 0;     // bytes of sequence states + MLA caches over all slots; 0 = the
                                  // model's state_budget() (unlimited without --memory-budget)
  uint64_t prefix_cache_bytes = 0;  // budget of the prompt-prefix cache; 0 = no cache
};

struct SchedulerStats {
  int64_t running = 0;           // requests holding a slot
  int64_t waiting = 0;           // requests queued
  int64_t completed = 0;         // finished with stop or length
  int64_t cancelled = 0;         // by callback, cancel() or shutdown
  int64_t failed = 0;            // finished with error
  int64_t tokens_generated = 0;  // over all requests
  int64_t prompt_tokens = 0;     // prefilled so far
  int64_t prefill_segments = 0;  // the forward calls' prompt segments (one per sequence per step)
  uint64_t state_bytes = 0;      // held by running sequences now
  uint64_t reserved_bytes = 0;   // budgeted for running sequences at their full length
  PrefixCacheStats prefix_cache;  // all zero without a cache
};

class Scheduler {
 public:
  // `model` must outlive the scheduler.  Throws k3::Error for bad options.
  explicit Scheduler(const Model& model, const SchedulerOptions& options = {});
  // Cancels everything outstanding (on_done gets kCancelled) and joins the engine thread.
  ~Scheduler();
  // The same, while the object stays usable for stats(); later submits throw SchedulerBusy.
  // Idempotent; must not be called from a callback.
  void shutdown();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request and returns its id (> 0).  Throws k3::Error (invalid) or SchedulerBusy.
  uint64_t submit(Request request);
  // Asks the engine to cancel a waiting or running request; false when the id is unknown or done.
  bool cancel(uint64_t id);
  SchedulerStats stats() const;

  const SchedulerOptions& options() const { return options_; }
  // Context (tokens) a request's sequence may grow to.
  int64_t context_tokens(const Request& request) const;
  // Bytes of one sequence's states + caches at `tokens` tokens.
  uint64_t sequence_bytes(int64_t tokens) const;

 private:
  struct Slot;

  void validate_request(const Request& r) const;
  void loop();
  bool take_work(std::vector<std::unique_ptr<Slot>>& admitted, std::vector<std::unique_ptr<Slot>>& dropped,
                 std::unordered_set<uint64_t>& cancels);
  void step();
  // Finishes every running slot with kError and `message` (step() failed outside its own handling).
  void fail_running(const std::string& message);
  void finish(std::unique_ptr<Slot> slot, FinishReason reason, std::string message);
  uint64_t running_state_bytes() const;
  PrefixKey prefix_key(const Request& r, size_t len) const;
  int64_t cache_point(int64_t prompt_tokens) const;
  bool awaits_prefix(const Slot& next, const std::vector<std::unique_ptr<Slot>>& admitted) const;

  const Model& model_;
  const SchedulerOptions options_;
  PrefillSchedule schedule_;  // the segments' lengths (chunk_max = chunk where growth would change results)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t next_id_ = 1;
  std::deque<std::unique_ptr<Slot>> waiting_;  // FIFO
  std::unordered_set<uint64_t> live_;          // waiting or running ids
  std::unordered_set<uint64_t> cancel_;        // ids asked to cancel
  SchedulerStats stats_;

  std::vector<std::unique_ptr<Slot>> running_;  // engine thread only
  std::unique_ptr<PrefixCache> prefix_cache_;   // engine thread only; null without a budget
  std::mutex join_mu_;  // one shutdown() joins
  std::thread thread_;
};

}  // namespace k3
