#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "base/log.h"

namespace k3 {

const char* to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "error";
}

TokenLogprobs token_logprobs(const float* logits, int64_t vocab, int32_t token, int top) {
  float mx = logits[0];
  for (int64_t i = 1; i < vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  TokenLogprobs out;
  out.logprob = static_cast<float>(logits[token] - lse);
  const int64_t k = std::min<int64_t>(top, vocab);
  if (k > 0) {
    // The k best so far, kept sorted best first (ties: lower id first); k <= 20, so a small
    // insertion list beats sorting the vocabulary.
    std::vector<int32_t> best;
    best.reserve(static_cast<size_t>(k) + 1);
    const auto better = [&](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; };
    for (int64_t i = 0; i < vocab; ++i) {
      const int32_t id = static_cast<int32_t>(i);
      if (static_cast<int64_t>(best.size()) == k && !better(id, best.back())) continue;
      best.insert(std::upper_bound(best.begin(), best.end(), id, better), id);
      if (static_cast<int64_t>(best.size()) > k) best.pop_back();
    }
    for (int32_t id : best) out.top.emplace_back(id, static_cast<float>(logits[id] - lse));
  }
  return out;
}

// One request from submission to completion.  Fields other than id/admitted are only touched
// by the engine thread once the request leaves the queue.
struct Scheduler::Slot {
  uint64_t id = 0;
  Request request;
  int64_t context = 0;   // tokens the sequence may grow to
  uint64_t reserve = 0;  // sequence_bytes(context)
  bool admitted = false;
  SequenceState state;
  std::optional<Sampler> sampler;
  int64_t prefilled = 0;  // prompt tokens consumed
  int64_t cached = 0;     // of those, taken from the prefix cache
  int64_t shared_point = 0;  // the chunk boundary where the prompt leaves a cached one (also stored)
  int64_t generated = 0;
  int32_t last = 0;  // the latest sampled token, the next decode input
  TokenLogprobs logprobs;  // of the latest sampled token, when the request asks for them
};

namespace {
// Unset: what the model's memory budget leaves beside the weights (0 without one: unlimited).
SchedulerOptions with_model_budget(const Model& model, SchedulerOptions o) {
  if (o.memory_budget == 0) o.memory_budget = model.state_budget();
  return o;
}
}  // namespace

Scheduler::Scheduler(const Model& model, const SchedulerOptions& options)
    : model_(model), options_(with_model_budget(model, options)) {
  const int64_t max_pos = model.text().max_position_embeddings;
  K3_CHECK(options_.max_batch >= 1, "max_batch must be >= 1 (got ", options_.max_batch, ")");
  K3_CHECK(options_.prefill_chunk >= 1, "prefill_chunk must be >= 1 (got ", options_.prefill_chunk, ")");
  K3_CHECK(options_.step_prefill_tokens >= 1,
           "step_prefill_tokens must be >= 1 (got ", options_.step_prefill_tokens, ")");
  K3_CHECK(options_.max_context >= 0 && options_.max_context <= max_pos, "max_context must be in [0, ", max_pos,
           "] (got ", options_.max_context, ")");
  if (options_.prefix_cache_bytes > 0) prefix_cache_ = std::make_unique<PrefixCache>(options_.prefix_cache_bytes);
  schedule_.chunk = schedule_.chunk_max = options_.prefill_chunk;
  if (options_.prefill_chunk_max > options_.prefill_chunk) {
    if (prefill_growth_keeps_results(model, options_.prefill_chunk, options_.prefill_chunk_max))
      schedule_.chunk_max = options_.prefill_chunk_max;
    else
      log_info("scheduler: prefill segments stay at ", options_.prefill_chunk, " tokens (longer ones would change ",
               "results: the chunk is off the KDA chunks' grid, or the MLA form would change with the length)");
  }
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { shutdown(); }

void Scheduler::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  std::lock_guard<std::mutex> join_lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

int64_t Scheduler::context_tokens(const Request& r) const {
  const int64_t ctx = options_.max_context > 0 ? options_.max_context : model_.text().max_position_embeddings;
  if (r.max_tokens <= 0) return ctx;
  // (max_tokens capped first: a client's 2^63 - 1 overflowed the sum, which then escaped both the
  // context and the memory budget.)
  return std::min(ctx, static_cast<int64_t>(r.prompt.size()) + std::min(r.max_tokens, ctx));
}

uint64_t Scheduler::sequence_bytes(int64_t tokens) const {
  const TextConfig& c = model_.text();
  return SequenceState::fixed_bytes(c) +
         static_cast<uint64_t>(std::max<int64_t>(tokens, 0)) * SequenceState::bytes_per_token(c, model_.kv_cache_dtype());
}

void Scheduler::validate_request(const Request& r) const {
  const int64_t vocab = model_.text().vocab_size;
  K3_CHECK(!r.prompt.empty(), "prompt is empty");
  for (size_t i = 0; i < r.prompt.size(); ++i)
    K3_CHECK(r.prompt[i] >= 0 && r.prompt[i] < vocab, "prompt token ", i, " is ", r.prompt[i],
             ", outside the vocabulary [0, ", vocab, ")");
  for (int32_t t : r.stop_tokens)
    K3_CHECK(t >= 0 && t < vocab, "stop token ", t, " is outside the vocabulary [0, ", vocab, ")");
  K3_CHECK(r.max_tokens >= 0, "max_tokens must be >= 0 (got ", r.max_tokens, ")");
  const size_t hidden = static_cast<size_t>(model_.text().hidden_size);
  K3_CHECK(r.embedding_rows.size() == r.embedding_positions.size() * hidden, "embedding_rows holds ",
           r.embedding_rows.size(), " floats; ", r.embedding_positions.size(), " positions need ",
           r.embedding_positions.size() * hidden);
  for (size_t i = 0; i < r.embedding_positions.size(); ++i) {
    const int64_t p = r.embedding_positions[i];
    K3_CHECK(p >= 0 && p < static_cast<int64_t>(r.prompt.size()), "embedding position ", p,
             " is outside the prompt of ", r.prompt.size(), " tokens");
    K3_CHECK(i == 0 || p > r.embedding_positions[i - 1], "embedding positions must be strictly increasing");
  }
  validate(r.sampling, vocab);
  K3_CHECK(r.top_logprobs >= -1 && r.top_logprobs <= kMaxTopLogprobs, "top_logprobs must be in [0, ", kMaxTopLogprobs,
           "] (got ", r.top_logprobs, ")");
  const int64_t ctx = options_.max_context > 0 ? options_.max_context : model_.text().max_position_embeddings;
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  K3_CHECK(n <= ctx, "prompt of ", n, " tokens exceeds the context of ", ctx, " tokens");
  const int64_t len = context_tokens(r);
  const uint64_t bytes = sequence_bytes(len);
  K3_CHECK(options_.memory_budget == 0 || bytes <= options_.memory_budget, "max_tokens: a context of ", len,
           " tokens needs ", bytes, " bytes of sequence state, over the memory budget of ", options_.memory_budget,
           " bytes");
}

uint64_t Scheduler::submit(Request request) {
  validate_request(request);
  auto slot = std::make_unique<Slot>();
  slot->context = context_tokens(request);
  slot->reserve = sequence_bytes(slot->context);
  slot->sampler.emplace(request.sampling, request.prompt);
  slot->request = std::move(request);
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) throw SchedulerBusy("the server is shutting down");
    // Requests that can start at once do not count against the queue bound.
    const size_t free_slots = static_cast<size_t>(std::max<int64_t>(options_.max_batch - stats_.running, 0));
    if (waiting_.size() >= options_.max_queue + free_slots)
      throw SchedulerBusy(cat("the server is busy: ", waiting_.size(), " sequences are queued for ", free_slots,
                              " free slots and a queue of ", options_.max_queue,
                              " (each of a request's n choices is a sequence); retry later"));
    id = next_id_++;
    slot->id = id;
    waiting_.push_back(std::move(slot));
    live_.insert(id);
    stats_.waiting = static_cast<int64_t>(waiting_.size());
  }
  cv_.notify_all();
  return id;
}

bool Scheduler::cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!live_.count(id)) return false;
    cancel_.insert(id);
  }
  cv_.notify_all();
  return true;
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

uint64_t Scheduler::running_state_bytes() const {
  uint64_t n = 0;
  for (const auto& s : running_) n += s->state.bytes();
  return n;
}

// Whether `next` should wait for a sequence that is still prefilling a prompt it starts with:
// that sequence is about to leave its state in the prefix cache, and next would then prefill
// only the rest instead of computing the same prefix beside it (the cores are busy either way).
bool Scheduler::awaits_prefix(const Slot& next, const std::vector<std::unique_ptr<Slot>>& admitted) const {
  const int64_t n = static_cast<int64_t>(next.request.prompt.size());
  const PrefixKey key = prefix_key(next.request, next.request.prompt.size());
  const auto feeds = [&](const Slot& s) {
    const int64_t at = cache_point(static_cast<int64_t>(s.request.prompt.size()));
    return at > 0 && s.prefilled < at && at < n && same_prefix(prefix_key(s.request, s.request.prompt.size()), key, at);
  };
  for (const auto& s : running_)
    if (feeds(*s)) return true;
  for (const auto& s : admitted)
    if (feeds(*s)) return true;
  return false;
}

// Under the lock: waits for something to do, then hands the engine the requests to admit (FIFO,
// while slots and memory allow), the queued ones to drop, and the running ids to cancel.
// Returns true when the scheduler is stopping.
bool Scheduler::take_work(std::vector<std::unique_ptr<Slot>>& admitted, std::vector<std::unique_ptr<Slot>>& dropped,
                          std::unordered_set<uint64_t>& cancels) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return stop_ || !cancel_.empty() || !running_.empty() || !waiting_.empty(); });
  cancels.swap(cancel_);
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (stop_ || cancels.count((*it)->id)) {
      dropped.push_back(std::move(*it));
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  // FIFO, except that a request waiting for a prefix being prefilled lets later ones pass.
  for (auto it = waiting_.begin();
       !stop_ && it != waiting_.end() && static_cast<int>(running_.size() + admitted.size()) < options_.max_batch;) {
    Slot& next = **it;
    if (options_.memory_budget != 0 && stats_.reserved_bytes + next.reserve > options_.memory_budget) break;
    if (prefix_cache_ && awaits_prefix(next, admitted)) {
      ++it;
      continue;
    }
    next.admitted = true;
    stats_.reserved_bytes += next.reserve;
    ++stats_.running;
    admitted.push_back(std::move(*it));
    it = waiting_.erase(it);
  }
  stats_.waiting = static_cast<int64_t>(waiting_.size());
  return stop_;
}

void Scheduler::loop() {
  for (;;) {
    std::vector<std::unique_ptr<Slot>> admitted, dropped;
    std::unordered_set<uint64_t> cancels;
    const bool stop = take_work(admitted, dropped, cancels);
    for (auto& s : dropped) finish(std::move(s), FinishReason::kCancelled, stop ? "the scheduler shut down" : "");
    for (auto& s : admitted) {
      // A sequence that cannot be set up (its state or a cached prefix does not fit in memory)
      // fails alone; an exception leaving this thread would end the process.
      try {
        s->state = model_.new_sequence(s->context);
        if (prefix_cache_) {
          const PrefixKey key = prefix_key(s->request, s->request.prompt.size());
          const int64_t n = static_cast<int64_t>(s->request.prompt.size());
          s->shared_point = std::min(prefix_cache_->shared_prefix(key), n - 1) / options_.prefill_chunk * options_.prefill_chunk;
          s->cached = s->prefilled = prefix_cache_->restore(key, &s->state);
          std::lock_guard<std::mutex> lock(mu_);
          stats_.prefix_cache = prefix_cache_->stats();
        }
      } catch (const std::exception& e) {
        finish(std::move(s), FinishReason::kError, cat("cannot start the sequence: ", e.what()));
        continue;
      }
      if (s->request.on_admitted) {
        try {
          s->request.on_admitted(s->cached);
        } catch (const std::exception& e) {
          finish(std::move(s), FinishReason::kError, cat("on_admitted failed: ", e.what()));
          continue;
        }
      }
      running_.push_back(std::move(s));
    }
    for (size_t i = 0; i < running_.size();) {
      if (stop || cancels.count(running_[i]->id)) {
        std::unique_ptr<Slot> s = std::move(running_[i]);
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
        finish(std::move(s), FinishReason::kCancelled, stop ? "the scheduler shut down" : "");
      } else {
        ++i;
      }
    }
    if (stop) return;
    if (running_.empty()) continue;
    try {
      step();
    } catch (const std::exception& e) {
      // step() handles the forward pass's and the sampler's errors per request; anything else
      // (memory running out between them) leaves the slots in an unknown state: fail them all
      // and keep serving, rather than let the exception end the process.
      fail_running(cat("internal error: ", e.what()));
    }
  }
}

void Scheduler::fail_running(const std::string& message) {
  std::vector<std::unique_ptr<Slot>> slots = std::move(running_);
  running_.clear();
  for (auto& s : slots) finish(std::move(s), FinishReason::kError, message);
}

PrefixKey Scheduler::prefix_key(const Request& r, size_t len) const {
  return {std::span<const int32_t>(r.prompt.data(), len), r.embedding_positions, r.embedding_rows,
          static_cast<size_t>(model_.text().hidden_size)};
}

// Where a prompt of n tokens leaves its state in the prefix cache: its last prefill chunk
// boundary below n (0: nowhere).
int64_t Scheduler::cache_point(int64_t n) const { return (n - 1) / options_.prefill_chunk * options_.prefill_chunk; }

// One forward call: a prefill chunk for sequences still reading their prompt (oldest first,
// within the step's prompt-token budget) and one decode token for every other sequence.
void Scheduler::step() {
  struct Entry {
    Slot* slot;
    int64_t prompt_len;  // prompt tokens in this call, 0 for a decode step
  };
  std::vector<SequenceInput> batch;
  std::vector<Entry> entries;
  // Per-entry embedding overrides; reserved up front so the spans handed to forward stay valid.
  std::vector<std::vector<EmbeddingOverride>> overrides;
  overrides.reserve(running_.size());
  const size_t hidden = static_cast<size_t>(model_.text().hidden_size);
  int64_t budget = options_.step_prefill_tokens;
  bool any_prefill = false;
  for (const auto& s : running_) {
    const std::vector<int32_t>& prompt = s->request.prompt;
    const int64_t n = static_cast<int64_t>(prompt.size());
    if (s->prefilled < n) {
      const int64_t len = schedule_.length(s->prefilled, n, {cache_point(n), s->shared_point});
      if (any_prefill && len > budget) continue;
      budget -= len;
      any_prefill = true;
      const std::vector<int64_t>& pos = s->request.embedding_positions;
      std::vector<EmbeddingOverride>& ovr = overrides.emplace_back();
      auto it = std::lower_bound(pos.begin(), pos.end(), s->prefilled);
      for (; it != pos.end() && *it < s->prefilled + len; ++it)
        ovr.push_back({*it - s->prefilled, s->request.embedding_rows.data() + (it - pos.begin()) * hidden});
      batch.push_back({&s->state, std::span<const int32_t>(prompt.data() + s->prefilled, len), false,
                       std::span<const EmbeddingOverride>(ovr)});
      entries.push_back({s.get(), len});
    } else {
      batch.push_back({&s->state, std::span<const int32_t>(&s->last, 1), false});
      entries.push_back({s.get(), 0});
    }
  }

  std::vector<float> logits;
  std::string error;
  try {
    model_.forward(batch, &logits);
  } catch (const std::exception& e) {
    error = e.what();
  }

  // Sample, then publish the counters, then run the callbacks (outside the lock).
  const int64_t vocab = model_.text().vocab_size;
  std::vector<std::pair<Slot*, int32_t>> emitted;
  std::vector<std::pair<Slot*, std::string>> failed;
  std::vector<float> masked;
  int64_t prompt_done = 0, segments = 0;
  if (error.empty()) {
    for (size_t i = 0; i < entries.size(); ++i) {
      Slot& s = *entries[i].slot;
      s.prefilled += entries[i].prompt_len;
      prompt_done += entries[i].prompt_len;
      segments += entries[i].prompt_len > 0 ? 1 : 0;
      if (prefix_cache_ && entries[i].prompt_len > 0 && s.prefilled > s.cached &&
          (s.prefilled == cache_point(static_cast<int64_t>(s.request.prompt.size())) || s.prefilled == s.shared_point)) {
        try {  // the cache is an optimisation: a state it cannot copy is just not kept
          prefix_cache_->store(prefix_key(s.request, static_cast<size_t>(s.prefilled)), s.state);
        } catch (const std::exception& e) {
          log_warn("prefix cache: not keeping a ", s.prefilled, "-token prefix: ", e.what());
        }
      }
      if (s.prefilled < static_cast<int64_t>(s.request.prompt.size())) continue;  // mid-prompt
      const float* row = logits.data() + i * static_cast<size_t>(vocab);
      int32_t tok = 0;
      try {
        if (s.request.constraint) {
          masked.assign(row, row + vocab);
          s.request.constraint->mask(masked.data(), vocab);
          tok = s.sampler->sample(masked.data(), vocab);
          s.request.constraint->accept(tok);
        } else {
          tok = s.sampler->sample(row, vocab);
        }
      } catch (const std::exception& e) {
        failed.emplace_back(&s, cat("constrained decoding failed: ", e.what()));
        continue;
      }
      if (s.request.top_logprobs >= 0 && s.request.on_logprobs) {
        try {
          s.logprobs = token_logprobs(row, vocab, tok, s.request.top_logprobs);
        } catch (const std::exception& e) {
          failed.emplace_back(&s, cat("logprobs failed: ", e.what()));
          continue;
        }
      }
      ++s.generated;
      emitted.emplace_back(&s, tok);
    }
  }
  const uint64_t held = running_state_bytes();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.prompt_tokens += prompt_done;
    stats_.prefill_segments += segments;
    stats_.tokens_generated += static_cast<int64_t>(emitted.size());
    stats_.state_bytes = held;
    if (prefix_cache_) stats_.prefix_cache = prefix_cache_->stats();
  }

  std::vector<std::pair<Slot*, std::pair<FinishReason, std::string>>> done;
  if (!error.empty()) {
    for (const Entry& e : entries) done.push_back({e.slot, {FinishReason::kError, error}});
  }
  for (auto& [s, why] : failed) done.push_back({s, {FinishReason::kError, std::move(why)}});
  for (auto& [s, tok] : emitted) {
    const Request& r = s->request;
    bool keep = true;
    try {
      if (r.top_logprobs >= 0 && r.on_logprobs) r.on_logprobs(tok, s->logprobs);
      if (r.on_token) keep = r.on_token(tok);
    } catch (const std::exception& e) {
      done.push_back({s, {FinishReason::kError, cat("on_token failed: ", e.what())}});
      continue;
    }
    if (!keep)
      done.push_back({s, {FinishReason::kCancelled, ""}});
    else if (std::find(r.stop_tokens.begin(), r.stop_tokens.end(), tok) != r.stop_tokens.end())
      done.push_back({s, {FinishReason::kStop, ""}});
    else if ((r.max_tokens > 0 && s->generated >= r.max_tokens) || s->state.full_with_sampled_token())
      done.push_back({s, {FinishReason::kLength, ""}});
    else
      s->last = tok;
  }
  for (auto& [ptr, why] : done) {
    auto it = std::find_if(running_.begin(), running_.end(), [p = ptr](const auto& s) { return s.get() == p; });
    std::unique_ptr<Slot> s = std::move(*it);
    running_.erase(it);
    finish(std::move(s), why.first, std::move(why.second));
  }
}

// Frees the slot's state, updates the counters, then tells the client.
void Scheduler::finish(std::unique_ptr<Slot> slot, FinishReason reason, std::string message) {
  RequestResult result{reason, std::move(message), static_cast<int64_t>(slot->request.prompt.size()),
                       slot->generated, slot->cached};
  std::function<void(const RequestResult&)> on_done = std::move(slot->request.on_done);
  const uint64_t id = slot->id;
  const bool admitted = slot->admitted;
  const uint64_t reserve = slot->reserve;
  slot.reset();
  const uint64_t held = running_state_bytes();
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(id);
    cancel_.erase(id);
    if (admitted) {
      --stats_.running;
      stats_.reserved_bytes -= reserve;
    }
    stats_.state_bytes = held;
    if (reason == FinishReason::kCancelled)
      ++stats_.cancelled;
    else if (reason == FinishReason::kError)
      ++stats_.failed;
    else
      ++stats_.completed;
  }
  cv_.notify_all();
  if (on_done) {
    try {
      on_done(result);
    } catch (...) {  // nothing left to tell; keep the engine alive
    }
  }
}

}  // namespace k3
