// Scheduler: batched requests produce exactly what lone k3::generate runs produce, cancellation
// and completion free slots, the queue bound and the memory budget hold, and invalid requests
// are refused with errors that name the field.  No timing: callbacks and futures synchronise.
#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <limits>
#include <numeric>
#include <memory>

#include "base/error.h"
#include "base/rng.h"
#include "engine/generator.h"
#include "engine/prefix_cache.h"
#include "engine/scheduler.h"
#include "support/test_support.h"
#include "synth/synth_checkpoint.h"

namespace k3 {
namespace {

// What one request delivered.  tokens is written on the engine thread and read after `result`
// is ready (the promise orders the two).
struct Stream {
  std::vector<int32_t> tokens;
  std::promise<RequestResult> done;
  std::future<RequestResult> result = done.get_future();
  std::function<bool(int32_t)> hook;  // extra per-token behaviour; false cancels
  std::vector<int64_t> admitted;      // on_admitted's cached_tokens, each call
  bool token_before_admission = false;
};

// Attaches callbacks that record into `run`.
Request make_request(std::vector<int32_t> prompt, int64_t max_tokens, Stream& run, SamplingParams sampling = {}) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling = sampling;
  r.on_admitted = [&run](int64_t cached) { run.admitted.push_back(cached); };
  r.on_token = [&run](int32_t t) {
    if (run.admitted.empty()) run.token_before_admission = true;
    run.tokens.push_back(t);
    return run.hook ? run.hook(t) : true;
  };
  r.on_done = [&run](const RequestResult& res) { run.done.set_value(res); };
  return r;
}

// Requests with the streams their callbacks record into.
struct Batch {
  std::vector<Request> reqs;
  std::vector<std::unique_ptr<Stream>> runs;
  Stream& add(std::vector<int32_t> prompt, int64_t max_tokens, SamplingParams sampling = {}) {
    runs.push_back(std::make_unique<Stream>());
    reqs.push_back(make_request(std::move(prompt), max_tokens, *runs.back(), sampling));
    return *runs.back();
  }
  void submit_all(Scheduler& s) const {
    for (const Request& r : reqs) EXPECT_GT(s.submit(r), 0u);
  }
};

std::vector<int32_t> random_tokens(int n, int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng.below(vocab - 256));
  return t;
}

// Holds the engine inside a stream's first token until release(): meanwhile the scheduler
// stands still, so a test can submit, cancel and read stats deterministically.
class Gate {
 public:
  std::function<bool(int32_t)> hook(Stream& s) {
    return [this, &s](int32_t) {
      if (s.tokens.size() == 1) {
        started_.set_value();
        go_.get_future().wait();
      }
      return true;
    };
  }
  void wait_held() { started_.get_future().wait(); }
  void release() { go_.set_value(); }

 private:
  std::promise<void> started_, go_;
};

// The synthetic checkpoint, written once for the whole suite.
const std::string& synth_dir() {
  static testing::TempDir dir;
  static const bool written = (write_synth_checkpoint(dir.path(), SynthOptions{}), true);
  (void)written;
  return dir.path();
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Model::load(synth_dir());
    vocab_ = model_->text().vocab_size;
  }

  // The tokens a lone run produces for the request.
  std::vector<int32_t> lone(const Request& r, int64_t chunk) const {
    SequenceState s = model_->new_sequence();
    GenerateOptions o;
    o.max_tokens = static_cast<int>(r.max_tokens);
    o.sampling = r.sampling;
    o.stop_tokens = r.stop_tokens;
    o.prefill_chunk = chunk;
    return generate(*model_, s, r.prompt, o);
  }

  std::vector<int32_t> prompt(int n, uint64_t seed) const { return random_tokens(n, static_cast<int>(vocab_), seed); }

  // Prefill chunks of 8 and the prefix cache on.
  static SchedulerOptions cached_options(int max_batch) {
    SchedulerOptions o;
    o.max_batch = max_batch;
    o.prefill_chunk = 8;
    o.prefix_cache_bytes = 1ull << 30;
    return o;
  }
  // One greedy request through `s`, alone; its tokens must be the lone run's.
  RequestResult run_checked(Scheduler& s, const std::vector<int32_t>& p, int64_t max_tokens) const {
    Stream run;
    const Request r = make_request(p, max_tokens, run);
    s.submit(r);
    const RequestResult res = run.result.get();
    EXPECT_EQ(run.tokens, lone(r, s.options().prefill_chunk)) << p.size() << " prompt tokens";
    // on_admitted reported the cached tokens once, before the first token.
    EXPECT_EQ(run.admitted, std::vector<int64_t>{res.cached_tokens});
    EXPECT_FALSE(run.token_before_admission);
    EXPECT_EQ(res.prompt_tokens, static_cast<int64_t>(p.size()));
    return res;
  }

  std::unique_ptr<Model> model_;
  int64_t vocab_ = 0;
};

// Submits the requests, waits for all, and checks each against its lone run.
void expect_lone_results(Batch& batch, const std::function<std::vector<int32_t>(const Request&)>& lone) {
  const std::vector<Request>& want = batch.reqs;
  std::vector<std::unique_ptr<Stream>>& runs = batch.runs;
  for (size_t i = 0; i < runs.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "request " << i);
    const RequestResult res = runs[i]->result.get();
    const std::vector<int32_t> expect = lone(want[i]);
    EXPECT_EQ(runs[i]->tokens, expect);
    EXPECT_EQ(res.completion_tokens, static_cast<int64_t>(expect.size()));
    EXPECT_EQ(res.prompt_tokens, static_cast<int64_t>(want[i].prompt.size()));
    const bool stopped = !expect.empty() && std::find(want[i].stop_tokens.begin(), want[i].stop_tokens.end(),
                                                      expect.back()) != want[i].stop_tokens.end();
    EXPECT_STREQ(to_string(res.reason), stopped ? "stop" : "length");
  }
}

TEST_F(SchedulerTest, ConcurrentGreedyRequestsMatchLoneRuns) {
  SchedulerOptions o;
  o.max_batch = 6;
  o.max_queue = 16;
  o.prefill_chunk = 32;
  o.step_prefill_tokens = 48;
  const int lengths[16] = {1, 3, 5, 17, 31, 32, 33, 40, 64, 70, 90, 100, 7, 12, 45, 2};
  Batch batch;
  for (int i = 0; i < 16; ++i) batch.add(prompt(lengths[i], 10 + i), 6 + i % 5);
  std::vector<Request>& reqs = batch.reqs;
  // Two requests stop on the third token of their lone run.
  for (int i : {4, 9}) reqs[i].stop_tokens = {lone(reqs[i], o.prefill_chunk).at(2)};
  {
    Scheduler sched(*model_, o);
    batch.submit_all(sched);
    expect_lone_results(batch, [&](const Request& r) { return lone(r, o.prefill_chunk); });
    const SchedulerStats st = sched.stats();
    EXPECT_EQ(st.completed, 16);
    EXPECT_EQ(st.running, 0);
    EXPECT_EQ(st.waiting, 0);
    EXPECT_EQ(st.state_bytes, 0u);
    EXPECT_EQ(st.reserved_bytes, 0u);
    int64_t prompt_total = 0, generated = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      prompt_total += static_cast<int64_t>(reqs[i].prompt.size());
      generated += static_cast<int64_t>(batch.runs[i]->tokens.size());
    }
    EXPECT_EQ(st.prompt_tokens, prompt_total);
    EXPECT_EQ(st.tokens_generated, generated);
  }
}

TEST_F(SchedulerTest, SeededSamplingIsReproducible) {
  SchedulerOptions o;
  o.max_batch = 3;
  o.prefill_chunk = 16;
  Batch batch;
  for (int i = 0; i < 5; ++i)
    batch.add(prompt(5 + 9 * i, 50 + i), 10, SamplingParams{0.9f, i % 2 ? 40 : 0, i % 3 ? 0.9f : 1.0f, 1000u + i});
  Scheduler sched(*model_, o);
  batch.submit_all(sched);
  expect_lone_results(batch, [&](const Request& r) { return lone(r, o.prefill_chunk); });
}

// A long prompt is prefilled in chunks while a running sequence keeps decoding every step.
TEST_F(SchedulerTest, LongPromptDoesNotStallRunningDecodes) {
  SchedulerOptions o;
  o.max_batch = 2;
  o.prefill_chunk = 16;
  o.step_prefill_tokens = 16;
  Scheduler sched(*model_, o);
  std::vector<char> order;  // engine thread only
  Gate gate;
  Stream a, b;
  Request ra = make_request(prompt(4, 1), 20, a);
  a.hook = [&, hold = gate.hook(a)](int32_t t) {
    order.push_back('a');
    return hold(t);
  };
  Request rb = make_request(prompt(100, 2), 3, b);
  b.hook = [&](int32_t) {
    order.push_back('b');
    return true;
  };
  sched.submit(ra);
  gate.wait_held();
  sched.submit(rb);
  gate.release();
  a.result.get();
  b.result.get();
  const auto first_b = std::find(order.begin(), order.end(), 'b');
  ASSERT_NE(first_b, order.end());
  // 100 prompt tokens = 7 chunks of 16, each step also decoding a.
  EXPECT_GE(std::count(order.begin(), first_b, 'a'), 7);
  EXPECT_EQ(a.tokens, lone(ra, o.prefill_chunk));
  EXPECT_EQ(b.tokens, lone(rb, o.prefill_chunk));
}

TEST_F(SchedulerTest, CancelledRequestsFreeTheirSlot) {
  SchedulerOptions o;
  o.max_batch = 1;
  Scheduler sched(*model_, o);
  // a: the client goes away after 3 tokens.
  Stream a, b, c;
  Request ra = make_request(prompt(9, 3), 50, a);
  a.hook = [&](int32_t) { return a.tokens.size() < 3; };
  SchedulerStats at_cancel;
  ra.on_done = [&](const RequestResult& res) {
    at_cancel = sched.stats();
    a.done.set_value(res);
  };
  sched.submit(ra);
  const Request rb = make_request(prompt(12, 4), 5, b);
  const Request rc = make_request(prompt(3, 5), 4, c);
  sched.submit(rb);
  sched.submit(rc);
  const RequestResult res_a = a.result.get();
  EXPECT_EQ(res_a.reason, FinishReason::kCancelled);
  EXPECT_EQ(res_a.completion_tokens, 3);
  EXPECT_EQ(at_cancel.running, 0);
  EXPECT_EQ(at_cancel.cancelled, 1);
  EXPECT_EQ(at_cancel.reserved_bytes, 0u);
  EXPECT_EQ(at_cancel.state_bytes, 0u);
  // The queued requests then run, unaffected.
  EXPECT_EQ(b.result.get().reason, FinishReason::kLength);
  EXPECT_EQ(c.result.get().reason, FinishReason::kLength);
  EXPECT_EQ(b.tokens, lone(rb, o.prefill_chunk));
  EXPECT_EQ(c.tokens, lone(rc, o.prefill_chunk));

  // d: cancelled through cancel(id) while running; e: cancelled while still queued.
  Stream d, e;
  Gate gate;
  Request rd = make_request(prompt(6, 6), 1000, d);
  d.hook = gate.hook(d);
  const uint64_t id_d = sched.submit(rd);
  gate.wait_held();
  const uint64_t id_e = sched.submit(make_request(prompt(6, 7), 5, e));
  EXPECT_EQ(sched.stats().waiting, 1);
  EXPECT_TRUE(sched.cancel(id_e));
  EXPECT_TRUE(sched.cancel(id_d));
  EXPECT_FALSE(sched.cancel(987654));
  gate.release();
  const RequestResult res_d = d.result.get();
  EXPECT_EQ(res_d.reason, FinishReason::kCancelled);
  EXPECT_EQ(res_d.completion_tokens, 1);
  const RequestResult res_e = e.result.get();
  EXPECT_EQ(res_e.reason, FinishReason::kCancelled);
  EXPECT_EQ(res_e.completion_tokens, 0);
  EXPECT_TRUE(e.tokens.empty());
  EXPECT_FALSE(sched.cancel(id_d));
  const SchedulerStats st = sched.stats();
  EXPECT_EQ(st.cancelled, 3);
  EXPECT_EQ(st.completed, 2);
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.waiting, 0);
}

TEST_F(SchedulerTest, FullQueueIsBusyNotInvalid) {
  SchedulerOptions o;
  o.max_batch = 1;
  o.max_queue = 2;
  Scheduler sched(*model_, o);
  Stream a, b, c, d;
  Gate gate;
  a.hook = gate.hook(a);
  sched.submit(make_request(prompt(5, 8), 3, a));
  gate.wait_held();  // a holds the only slot
  sched.submit(make_request(prompt(5, 9), 3, b));
  sched.submit(make_request(prompt(5, 10), 3, c));
  const SchedulerStats st = sched.stats();
  EXPECT_EQ(st.running, 1);
  EXPECT_EQ(st.waiting, 2);
  try {
    sched.submit(make_request(prompt(5, 11), 3, d));
    ADD_FAILURE() << "a third queued request was accepted";
  } catch (const SchedulerBusy& e) {
    // Counted in sequences (n choices make n), against the free slots and the queue.
    EXPECT_NE(std::string(e.what()).find("busy: 2 sequences are queued for 0 free slots and a queue of 2"),
              std::string::npos)
        << e.what();
  }
  gate.release();
  for (Stream* r : {&a, &b, &c}) EXPECT_EQ(r->result.get().reason, FinishReason::kLength);
  EXPECT_EQ(d.result.wait_for(std::chrono::seconds(0)), std::future_status::timeout);  // never accepted
  EXPECT_EQ(sched.stats().completed, 3);
}

TEST_F(SchedulerTest, InvalidRequestsNameTheField) {
  SchedulerOptions o;
  o.max_context = 64;
  o.memory_budget = 0;
  Scheduler sched(*model_, o);
  Stream run;
  const auto expect_invalid = [&](Request r, const std::string& needle, Scheduler& s) {
    try {
      s.submit(std::move(r));
      ADD_FAILURE() << "accepted; expected an error naming " << needle;
    } catch (const SchedulerBusy& e) {
      ADD_FAILURE() << "busy instead of invalid: " << e.what();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const auto base = [&] { return make_request(prompt(8, 12), 4, run); };
  Request r = base();
  r.prompt.clear();
  expect_invalid(r, "prompt is empty", sched);
  r = base();
  r.prompt[3] = -1;
  expect_invalid(r, "prompt token 3", sched);
  r = base();
  r.prompt[0] = static_cast<int32_t>(vocab_);
  expect_invalid(r, "vocabulary", sched);
  r = base();
  r.prompt = prompt(65, 13);
  expect_invalid(r, "exceeds the context of 64", sched);
  r = base();
  r.max_tokens = -2;
  expect_invalid(r, "max_tokens", sched);
  r = base();
  r.sampling.temperature = -1.0f;
  expect_invalid(r, "temperature", sched);
  r = base();
  r.sampling.top_p = 0.0f;
  expect_invalid(r, "top_p", sched);
  r = base();
  r.sampling.top_k = -3;
  expect_invalid(r, "top_k", sched);
  r = base();
  r.stop_tokens = {static_cast<int32_t>(vocab_) + 5};
  expect_invalid(r, "stop token", sched);
  const size_t hidden = static_cast<size_t>(model_->text().hidden_size);
  r = base();
  r.embedding_positions = {2};
  r.embedding_rows.assign(hidden - 1, 0.5f);
  expect_invalid(r, "embedding_rows", sched);
  r = base();
  r.embedding_positions = {8};
  r.embedding_rows.assign(hidden, 0.5f);
  expect_invalid(r, "embedding position 8", sched);
  r = base();
  r.embedding_positions = {3, 3};
  r.embedding_rows.assign(2 * hidden, 0.5f);
  expect_invalid(r, "strictly increasing", sched);

  SchedulerOptions small = o;
  small.memory_budget = sched.sequence_bytes(32);
  Scheduler tight(*model_, small);
  r = base();
  r.max_tokens = 40;  // context 48 > the 32 tokens the budget holds
  expect_invalid(r, "memory budget", tight);
  EXPECT_EQ(sched.stats().waiting + sched.stats().running + tight.stats().waiting, 0);

  SchedulerOptions bad;
  bad.max_batch = 0;
  EXPECT_THROW(std::make_unique<Scheduler>(*model_, bad), Error);
  bad = {};
  bad.max_context = model_->text().max_position_embeddings + 1;
  EXPECT_THROW(std::make_unique<Scheduler>(*model_, bad), Error);
  // A prompt exactly as long as the context still yields its one token.
  r = base();
  r.prompt = prompt(64, 14);
  r.max_tokens = 0;
  sched.submit(r);
  const RequestResult res = run.result.get();
  EXPECT_EQ(res.reason, FinishReason::kLength);
  EXPECT_EQ(res.completion_tokens, 1);
}

// A model loaded under one memory budget gives the scheduler what its weights leave: a request
// whose context needs more sequence state than that is refused, naming the budget.
TEST_F(SchedulerTest, ModelMemoryBudgetLimitsTheSequences) {
  Scheduler probe(*model_, SchedulerOptions{});
  EXPECT_EQ(probe.options().memory_budget, 0u);  // no memory budget: unlimited
  ModelOptions mo;
  mo.memory_budget = uint64_t{1} << 40;
  // A memory budget alone reads weights that fit its share into memory; the sequences get the rest.
  const auto in_memory = Model::load(synth_dir(), mo);
  EXPECT_EQ(in_memory->checkpoint().residency(), Residency::kMemory);
  EXPECT_EQ(in_memory->state_budget(), mo.memory_budget - in_memory->checkpoint().total_bytes());
  // One whose weights' share (7/8) is smaller than the checkpoint streams them.
  ModelOptions small;
  small.memory_budget = in_memory->checkpoint().total_bytes();
  EXPECT_EQ(Model::load(synth_dir(), small)->checkpoint().residency(), Residency::kStreamed);
  // Streamed, the weights hold what the store placed.
  mo.residency = Residency::kStreamed;
  const auto all = Model::load(synth_dir(), mo);
  ASSERT_NE(all->weight_store(), nullptr);
  const WeightStoreStats st = all->weight_store()->stats();
  const uint64_t held =
      st.trunk_resident_bytes + st.ring_bytes + static_cast<uint64_t>(st.expert_slots) * st.expert_slot_bytes;
  mo.state_reserve = probe.sequence_bytes(32);
  mo.memory_budget = held + mo.state_reserve;
  const auto tight_model = Model::load(synth_dir(), mo);
  EXPECT_EQ(tight_model->state_budget(), mo.state_reserve);
  Scheduler tight(*tight_model, SchedulerOptions{});
  EXPECT_EQ(tight.options().memory_budget, mo.state_reserve);
  Stream run;
  Request r = make_request({1, 2, 3, 4, 5, 6, 7, 8}, 40, run);  // context 48 > the 32 tokens the budget holds
  const std::string err = testing::error_of([&] { tight.submit(std::move(r)); });
  EXPECT_NE(err.find("memory budget"), std::string::npos) << err;
}

// Embedding overrides (image rows) reach the model in whichever prefill chunk holds them: a
// batched request with overrides spanning chunk boundaries equals a lone chunked run with the
// same overrides, and differs from the run without them.
TEST_F(SchedulerTest, EmbeddingOverridesMatchLoneRun) {
  const int64_t chunk = 8;
  const int64_t hidden = model_->text().hidden_size;
  Request want;
  want.prompt = prompt(30, 77);
  want.max_tokens = 6;
  want.embedding_positions = {2, 7, 8, 9, 23};
  Rng rng(5);
  want.embedding_rows.resize(want.embedding_positions.size() * static_cast<size_t>(hidden));
  for (float& v : want.embedding_rows) v = 0.5f * static_cast<float>(rng.normal());

  // The lone run: prefill chunk by chunk with the overrides of each chunk, then greedy decode.
  const auto lone_with = [&](bool with_overrides) {
    SequenceState st = model_->new_sequence();
    std::vector<float> logits;
    for (int64_t at = 0; at < static_cast<int64_t>(want.prompt.size()); at += chunk) {
      const int64_t len = std::min<int64_t>(chunk, static_cast<int64_t>(want.prompt.size()) - at);
      std::vector<EmbeddingOverride> ovr;
      for (size_t i = 0; i < want.embedding_positions.size() && with_overrides; ++i) {
        const int64_t p = want.embedding_positions[i];
        if (p >= at && p < at + len) ovr.push_back({p - at, want.embedding_rows.data() + i * hidden});
      }
      const SequenceInput in{&st, std::span<const int32_t>(want.prompt.data() + at, len), false, ovr};
      logits.clear();
      model_->forward({&in, 1}, &logits);
    }
    std::vector<int32_t> out{argmax(logits.data(), vocab_)};
    while (static_cast<int64_t>(out.size()) < want.max_tokens) {
      const SequenceInput in{&st, std::span<const int32_t>(&out.back(), 1), false};
      logits.clear();
      model_->forward({&in, 1}, &logits);
      out.push_back(argmax(logits.data(), vocab_));
    }
    return out;
  };

  SchedulerOptions o;
  o.max_batch = 3;
  o.prefill_chunk = chunk;
  o.step_prefill_tokens = 2 * chunk;
  Scheduler sched(*model_, o);
  Batch batch;
  batch.add(prompt(13, 78), 5);
  Stream& with = batch.add(want.prompt, want.max_tokens);
  batch.reqs.back().embedding_positions = want.embedding_positions;
  batch.reqs.back().embedding_rows = want.embedding_rows;
  batch.add(prompt(21, 79), 7);
  batch.submit_all(sched);
  for (auto& r : batch.runs) r->result.get();
  const std::vector<int32_t> expect = lone_with(true);
  EXPECT_EQ(with.tokens, expect);
  EXPECT_EQ(batch.runs[0]->tokens, lone(batch.reqs[0], chunk));
  EXPECT_EQ(batch.runs[2]->tokens, lone(batch.reqs[2], chunk));
  EXPECT_NE(lone_with(false), expect) << "the overrides should change the output";
}

// With memory for one sequence, a second request waits until the first is done.
TEST_F(SchedulerTest, MemoryBudgetMakesRequestsWait) {
  SchedulerOptions o;
  o.max_batch = 4;
  o.max_context = 64;
  o.memory_budget = 0;
  Stream a, b;
  Request ra = make_request(prompt(10, 15), 6, a);
  Request rb = make_request(prompt(10, 16), 6, b);
  SchedulerOptions one = o;
  Scheduler probe(*model_, o);
  one.memory_budget = probe.sequence_bytes(probe.context_tokens(ra)) + probe.sequence_bytes(3);
  Scheduler sched(*model_, one);
  Gate gate;
  a.hook = gate.hook(a);
  bool a_done_before_b = false;
  b.hook = [&](int32_t) {
    if (b.tokens.size() == 1) a_done_before_b = a.tokens.size() == 6;  // same thread: no race
    return true;
  };
  sched.submit(ra);
  gate.wait_held();
  sched.submit(rb);
  gate.release();
  EXPECT_EQ(a.result.get().reason, FinishReason::kLength);
  EXPECT_EQ(b.result.get().reason, FinishReason::kLength);
  EXPECT_TRUE(a_done_before_b);
  EXPECT_EQ(a.tokens, lone(ra, o.prefill_chunk));
  EXPECT_EQ(b.tokens, lone(rb, o.prefill_chunk));

  // Six requests under a budget for two: never more than two at once, all served.
  SchedulerOptions two = o;
  two.memory_budget = 2 * probe.sequence_bytes(30);
  Scheduler pair(*model_, two);
  Batch batch;
  int64_t most_running = 0;  // engine thread only until the results are in
  for (int i = 0; i < 6; ++i) {
    batch.add(prompt(20, 20 + i), 10).hook = [&](int32_t) {
      const SchedulerStats st = pair.stats();
      most_running = std::max(most_running, st.running);
      EXPECT_LE(st.reserved_bytes, two.memory_budget);
      return true;
    };
  }
  batch.submit_all(pair);
  expect_lone_results(batch, [&](const Request& r) { return lone(r, two.prefill_chunk); });
  EXPECT_LE(most_running, 2);
  EXPECT_GE(most_running, 1);
}

// Prompt + output never exceed the context: a 10-token prompt in a 16-token context gets 6
// tokens, whatever max_tokens asks (2^63 - 1 used to overflow the reservation and run on to the
// model's full length), and a lone generate() stops at the same count.
TEST_F(SchedulerTest, PromptPlusOutputFitTheContext) {
  SchedulerOptions o;
  o.max_batch = 2;
  o.max_context = 16;
  Scheduler sched(*model_, o);
  for (int64_t max_tokens : {int64_t{100}, std::numeric_limits<int64_t>::max()}) {
    SCOPED_TRACE(max_tokens);
    Stream run;
    Request r = make_request(prompt(10, 31), max_tokens, run);
    EXPECT_EQ(sched.context_tokens(r), 16);
    sched.submit(r);
    const RequestResult res = run.result.get();
    EXPECT_EQ(res.reason, FinishReason::kLength);
    EXPECT_EQ(res.completion_tokens, 6);
    EXPECT_EQ(run.tokens.size(), 6u);
  }
  SequenceState st = model_->new_sequence(16);
  GenerateOptions g;
  g.max_tokens = 100;
  EXPECT_EQ(generate(*model_, st, prompt(10, 31), g).size(), 6u);
  SequenceState full = model_->new_sequence(16);
  EXPECT_TRUE(generate(*model_, full, prompt(16, 32), g).empty());  // no room left for output
}

// Prefills `tokens` into `st` in chunks of `chunk` (as a lone run does); the last logits.
std::vector<float> prefill(const Model& m, SequenceState& st, std::span<const int32_t> tokens, int64_t chunk) {
  std::vector<float> logits;
  for (size_t at = 0; at < tokens.size(); at += static_cast<size_t>(chunk)) {
    const SequenceInput in{&st, tokens.subspan(at, std::min<size_t>(static_cast<size_t>(chunk), tokens.size() - at)), false};
    logits.clear();
    m.forward({&in, 1}, &logits);
  }
  return logits;
}

PrefixKey key_of(const std::vector<int32_t>& tokens, size_t len) { return {std::span(tokens.data(), len), {}, {}, 0}; }

// The cache hands out the longest stored prefix shorter than the prompt, and a state resumed
// from a chunk boundary goes on exactly (bit for bit) as a cold prefill does.
TEST_F(SchedulerTest, PrefixCacheRestoresTheLongestPrefix) {
  const std::vector<int32_t> p = prompt(30, 90);
  SequenceState s8 = model_->new_sequence(), s16 = model_->new_sequence();
  prefill(*model_, s8, std::span(p.data(), 8), 8);
  prefill(*model_, s16, std::span(p.data(), 16), 8);
  PrefixCache cache(1ull << 30);
  cache.store(key_of(p, 8), s8);
  cache.store(key_of(p, 16), s16);
  cache.store(key_of(p, 8), s8);  // the same key again: refreshed, not duplicated
  EXPECT_EQ(cache.stats().entries, 2);
  EXPECT_THROW(cache.store(key_of(p, 9), s8), Error);  // tokens and state disagree

  SequenceState r = model_->new_sequence();
  ASSERT_EQ(cache.restore(key_of(p, 30), &r), 16);
  EXPECT_EQ(r.position(), 16);
  SequenceState cold = model_->new_sequence();
  const std::vector<float> want = prefill(*model_, cold, p, 8);
  EXPECT_EQ(prefill(*model_, r, std::span(p.data() + 16, 14), 8), want);
  SequenceState from8 = model_->new_sequence();
  ASSERT_EQ(cache.restore(key_of(p, 16), &from8), 8) << "an entry as long as the prompt leaves nothing to prefill";
  EXPECT_EQ(prefill(*model_, from8, std::span(p.data() + 8, 22), 8), want);

  std::vector<int32_t> other = p;
  other[3] = (other[3] + 1) % static_cast<int32_t>(vocab_);
  SequenceState miss = model_->new_sequence();
  EXPECT_EQ(cache.restore(key_of(other, 30), &miss), 0);
  EXPECT_EQ(miss.position(), 0);
  SequenceState small = model_->new_sequence(12);
  EXPECT_EQ(cache.restore(key_of(p, 30), &small), 8) << "the 16-token entry does not fit 12 tokens";
  EXPECT_EQ(cache.stats().hits, 3);
  EXPECT_EQ(cache.stats().misses, 1);
  EXPECT_EQ(cache.stats().tokens_reused, 16 + 8 + 8);

  // A budget for one entry: the least recently used goes; a state above the budget is not kept.
  PrefixCache one(cache.stats().bytes * 3 / 4);
  one.store(key_of(p, 8), s8);
  one.store(key_of(p, 16), s16);
  EXPECT_EQ(one.stats().entries, 1);
  EXPECT_EQ(one.stats().evictions, 1);
  SequenceState r2 = model_->new_sequence();
  EXPECT_EQ(one.restore(key_of(p, 30), &r2), 16);
  PrefixCache tiny(1024);
  tiny.store(key_of(p, 8), s8);
  EXPECT_EQ(tiny.stats().entries, 0);
  EXPECT_LE(one.stats().bytes, one.budget());
}

// Behind identical <|media_pad|> tokens, only the same image rows share a cached state.
TEST_F(SchedulerTest, PrefixCacheComparesImageRows) {
  const size_t hidden = static_cast<size_t>(model_->text().hidden_size);
  const std::vector<int32_t> p = prompt(20, 91);
  const std::vector<int64_t> pos = {2, 3};
  std::vector<float> rows(2 * hidden), changed;
  Rng rng(3);
  for (float& v : rows) v = static_cast<float>(rng.normal());
  changed = rows;
  changed[hidden + 5] += 1e-3f;
  SequenceState st = model_->new_sequence();
  const std::vector<EmbeddingOverride> ovr = {{2, rows.data()}, {3, rows.data() + hidden}};
  const SequenceInput in{&st, std::span(p.data(), 8), false, ovr};
  std::vector<float> logits;
  model_->forward({&in, 1}, &logits);
  PrefixCache cache(1ull << 30);
  cache.store({std::span(p.data(), 8), pos, rows, hidden}, st);
  SequenceState a = model_->new_sequence(), b = model_->new_sequence(), c = model_->new_sequence();
  EXPECT_EQ(cache.restore({p, pos, changed, hidden}, &a), 0);
  EXPECT_EQ(cache.restore(key_of(p, p.size()), &b), 0) << "plain token embeddings at the pad positions";
  const std::vector<int64_t> later = {2, 3, 12};  // an override after the prefix does not matter
  std::vector<float> more = rows;
  more.resize(3 * hidden, 0.25f);
  EXPECT_EQ(cache.restore({p, later, more, hidden}, &c), 8);
}

// Through the scheduler: a prompt that extends (or repeats) an earlier one starts from its last
// chunk boundary, reports those tokens as cached, and still produces the lone run's tokens.
TEST_F(SchedulerTest, CachedPromptPrefixesGiveLoneResults) {
  Scheduler sched(*model_, cached_options(2));
  const std::vector<int32_t> a = prompt(21, 92);
  std::vector<int32_t> longer = a, changed = a;
  const std::vector<int32_t> tail = prompt(9, 93);
  longer.insert(longer.end(), tail.begin(), tail.end());
  changed[2] = (changed[2] + 7) % static_cast<int32_t>(vocab_);
  struct Case {
    std::vector<int32_t> prompt;
    int64_t cached;
  };
  // a stores its state at 16 (the last multiple of 8 below 21); longer at 24.
  const Case cases[] = {{a, 0}, {longer, 16}, {a, 16}, {changed, 0}, {longer, 24}};
  for (const Case& c : cases) EXPECT_EQ(run_checked(sched, c.prompt, 5).cached_tokens, c.cached) << c.prompt.size();
  const SchedulerStats st = sched.stats();
  EXPECT_EQ(st.prefix_cache.hits, 3);
  EXPECT_EQ(st.prefix_cache.misses, 2);
  EXPECT_EQ(st.prefix_cache.tokens_reused, 16 + 16 + 24);
  EXPECT_EQ(st.prefix_cache.entries, 3);  // a at 16, longer at 24, changed at 16
  EXPECT_GT(st.prefix_cache.bytes, 0u);
  EXPECT_EQ(st.prompt_tokens, 21 + 14 + 5 + 21 + 6);  // only what was prefilled
}

// Prompts that share a 20-token start and then differ: the second one stores a state at 16 (the
// last boundary before they part), and from the third on every such prompt starts there.
TEST_F(SchedulerTest, SharedPromptStartIsCachedFromItsSecondUse) {
  Scheduler sched(*model_, cached_options(1));
  const std::vector<int32_t> system = prompt(20, 94);
  const int64_t want_cached[] = {0, 0, 16, 16};
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p = system;
    const std::vector<int32_t> question = prompt(11, 95 + i);
    p.insert(p.end(), question.begin(), question.end());
    EXPECT_EQ(run_checked(sched, p, 4).cached_tokens, want_cached[i]) << "prompt " << i;
  }
  // Entries: each prompt's own boundary at 24, and the shared start at 16.
  EXPECT_EQ(sched.stats().prefix_cache.entries, 5);

  // shared_prefix itself stops at the first differing image row.
  const size_t hidden = static_cast<size_t>(model_->text().hidden_size);
  SequenceState st = model_->new_sequence();
  const std::vector<float> rows(2 * hidden, 0.5f);
  const std::vector<int64_t> pos = {3, 6};
  const std::vector<EmbeddingOverride> ovr = {{3, rows.data()}, {6, rows.data() + hidden}};
  const SequenceInput in{&st, std::span(system.data(), 8), false, ovr};
  std::vector<float> logits;
  model_->forward({&in, 1}, &logits);
  PrefixCache cache(1ull << 30);
  cache.store({std::span(system.data(), 8), pos, rows, hidden}, st);
  std::vector<float> other = rows;
  other[hidden + 1] = 0.25f;
  EXPECT_EQ(cache.shared_prefix({system, pos, rows, hidden}), 8);
  EXPECT_EQ(cache.shared_prefix({system, pos, other, hidden}), 6);
  EXPECT_EQ(cache.shared_prefix(key_of(system, system.size())), 3);
  EXPECT_EQ(cache.shared_prefix(key_of(system, 2)), 2);
}

// Deep in a long prompt the segments grow (engine/prefill_schedule.h): fewer steps, the same
// tokens as a lone run in chunks of 32, and the prefix cache still stores and restores states at
// the chunk grid's points.  The decompressed MLA form is fixed, so growth keeps every bit.
TEST_F(SchedulerTest, LongPromptSegmentsGrowAndKeepTheResults) {
  model_->options().mla.mode = MlaMode::kDecompressed;
  SchedulerOptions o = cached_options(1);
  o.prefill_chunk = 32;
  o.prefill_chunk_max = 256;
  const std::vector<int32_t> doc = prompt(1700, 96);
  std::vector<int32_t> follow = doc;
  const std::vector<int32_t> question = prompt(40, 97);
  follow.insert(follow.end(), question.begin(), question.end());
  {
    Scheduler sched(*model_, o);
    EXPECT_EQ(run_checked(sched, doc, 3).cached_tokens, 0);
    // Segments of 32 up to position 1024, then of 64: 45 (54 without growth), the last one from
    // the cached state's point (1696).
    const PrefillSchedule sch{32, 256};
    int64_t want = 0;
    for (int64_t pos = 0; pos < 1700; ++want) pos += sch.length(pos, 1700, {1696});
    EXPECT_EQ(want, 45);
    const int64_t segments = sched.stats().prefill_segments;
    EXPECT_EQ(segments, want);
    EXPECT_EQ(run_checked(sched, follow, 3).cached_tokens, 1696);
    EXPECT_EQ(sched.stats().prefill_segments, segments + 2) << "from 1696 to the store point 1728, then to the end";
  }
  o.prefill_chunk_max = 0;
  Scheduler fixed(*model_, o);
  EXPECT_EQ(run_checked(fixed, doc, 3).cached_tokens, 0);
  EXPECT_EQ(fixed.stats().prefill_segments, (1700 + 31) / 32);
  model_->options().mla.mode = MlaMode::kAuto;
}

TEST(TokenLogprobs, LogSoftmaxAndTheBestTokens) {
  const float logits[4] = {0.0f, std::log(2.0f), 0.0f, -1e30f};  // probabilities 1/4, 1/2, 1/4, 0
  const TokenLogprobs lp = token_logprobs(logits, 4, 2, 3);
  EXPECT_NEAR(lp.logprob, std::log(0.25), 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_NEAR(lp.top[0].second, std::log(0.5), 1e-6);
  EXPECT_EQ(lp.top[1].first, 0);  // a tie: the lower id first
  EXPECT_EQ(lp.top[2].first, 2);
  EXPECT_TRUE(token_logprobs(logits, 4, 1, 0).top.empty());
  EXPECT_EQ(token_logprobs(logits, 4, 1, 9).top.size(), 4u);
}

// The scheduler reports each token's log-probability under the logits it was sampled from
// (checked against a log-softmax computed here in double from a lone run's logits).
TEST_F(SchedulerTest, LogprobsFollowTheLogits) {
  const std::vector<int32_t> p = prompt(9, 96);
  std::vector<std::vector<float>> rows;
  SequenceState st = model_->new_sequence();
  GenerateOptions g;
  g.max_tokens = 5;
  g.prefill_chunk = 8;
  g.on_logits = [&](std::span<const float> l) { rows.emplace_back(l.begin(), l.end()); };
  const std::vector<int32_t> want = generate(*model_, st, p, g);

  SchedulerOptions o;
  o.prefill_chunk = 8;
  Scheduler sched(*model_, o);
  Stream run;
  Request r = make_request(p, 5, run);
  r.top_logprobs = 4;
  std::vector<std::pair<int32_t, TokenLogprobs>> got;
  r.on_logprobs = [&](int32_t tok, const TokenLogprobs& lp) { got.emplace_back(tok, lp); };
  sched.submit(r);
  run.result.get();
  ASSERT_EQ(run.tokens, want);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const std::vector<float>& l = rows[i];
    double mx = l[0], sum = 0.0;
    for (float v : l) mx = std::max(mx, static_cast<double>(v));
    for (float v : l) sum += std::exp(v - mx);
    const double lse = mx + std::log(sum);
    EXPECT_EQ(got[i].first, want[i]);
    EXPECT_NEAR(got[i].second.logprob, l[want[i]] - lse, 1e-5);
    std::vector<int32_t> order(l.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    ASSERT_EQ(got[i].second.top.size(), 4u);
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(got[i].second.top[k].first, order[k]);
      EXPECT_NEAR(got[i].second.top[k].second, l[order[k]] - lse, 1e-5);
    }
  }
  Request bad = make_request(p, 1, run);
  bad.top_logprobs = kMaxTopLogprobs + 1;
  EXPECT_THROW(sched.submit(bad), Error);
}

// The same prompt twice at once (n > 1 choices): the second waits for the first to store its
// prefix instead of computing it beside it, then prefills only the rest.
TEST_F(SchedulerTest, ConcurrentSamePromptIsPrefilledOnce) {
  const SchedulerOptions o = cached_options(4);
  Scheduler sched(*model_, o);
  const std::vector<int32_t> p = prompt(21, 97);
  Batch batch;
  batch.add(p, 5, SamplingParams{0.8f, 0, 1.0f, 1});
  batch.add(p, 5, SamplingParams{0.8f, 0, 1.0f, 2});
  batch.add(prompt(12, 98), 5);  // unrelated: not held back
  batch.submit_all(sched);
  std::vector<RequestResult> res;
  for (auto& r : batch.runs) res.push_back(r->result.get());
  EXPECT_EQ(res[0].cached_tokens, 0);
  EXPECT_EQ(res[1].cached_tokens, 16);
  EXPECT_EQ(res[2].cached_tokens, 0);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(batch.runs[i]->tokens, lone(batch.reqs[i], o.prefill_chunk)) << i;
  EXPECT_EQ(sched.stats().prompt_tokens, 21 + 5 + 12);
}

TEST_F(SchedulerTest, SingleSlotServesEveryRequest) {
  SchedulerOptions o;
  o.max_batch = 1;
  o.max_queue = 8;
  o.prefill_chunk = 8;
  Batch batch;
  for (int i = 0; i < 5; ++i) batch.add(prompt(3 + 7 * i, 30 + i), 4 + i);
  Scheduler sched(*model_, o);
  batch.submit_all(sched);
  expect_lone_results(batch, [&](const Request& r) { return lone(r, o.prefill_chunk); });
  EXPECT_EQ(sched.stats().completed, 5);
}

// Destruction tells every accepted request exactly once how it ended.
TEST_F(SchedulerTest, ShutdownFinishesEveryRequestOnce) {
  Batch batch;
  {
    SchedulerOptions o;
    o.max_batch = 2;
    o.max_context = 256;
    Scheduler sched(*model_, o);
    for (int i = 0; i < 5; ++i) batch.add(prompt(4, 40 + i), 0);
    batch.submit_all(sched);
  }
  for (auto& r : batch.runs) {
    ASSERT_EQ(r->result.wait_for(std::chrono::seconds(0)), std::future_status::ready);
    const RequestResult res = r->result.get();  // a second set_value would have thrown
    EXPECT_TRUE(res.reason == FinishReason::kCancelled || res.reason == FinishReason::kLength) << to_string(res.reason);
    EXPECT_EQ(res.completion_tokens, static_cast<int64_t>(r->tokens.size()));
  }
}

// shutdown() (the server's stop) ends everything like the destructor, twice is harmless, the
// stats stay readable, and later submits are busy (HTTP 503), not invalid.
TEST_F(SchedulerTest, ExplicitShutdownRefusesLaterRequests) {
  SchedulerOptions o;
  o.max_batch = 1;
  o.max_context = 256;
  Scheduler sched(*model_, o);
  Batch batch;
  for (int i = 0; i < 3; ++i) batch.add(prompt(4, 60 + i), 0);
  batch.submit_all(sched);
  sched.shutdown();
  sched.shutdown();
  for (auto& r : batch.runs) {
    ASSERT_EQ(r->result.wait_for(std::chrono::seconds(0)), std::future_status::ready);
    const RequestResult res = r->result.get();
    EXPECT_TRUE(res.reason == FinishReason::kCancelled || res.reason == FinishReason::kLength) << to_string(res.reason);
  }
  const SchedulerStats st = sched.stats();
  EXPECT_EQ(st.running + st.waiting, 0);
  EXPECT_EQ(st.completed + st.cancelled, 3);
  Stream late;
  EXPECT_THROW(sched.submit(make_request(prompt(4, 70), 2, late)), SchedulerBusy);
}


// A constraint that throws on its n-th mask call (a bug in a grammar, or memory running out).
class ThrowingConstraint : public TokenConstraint {
 public:
  explicit ThrowingConstraint(int fail_at) : fail_at_(fail_at) {}
  void mask(float*, int64_t) override {
    if (++calls_ == fail_at_) throw Error("grammar broke");
  }
  void accept(int32_t) override {}

 private:
  int fail_at_, calls_ = 0;
};

// Every callback a request brings may throw; each failure ends that request alone with an error
// that says where it came from, the requests batched beside it still give their lone results,
// and the engine keeps serving.
TEST_F(SchedulerTest, FailingCallbacksEndOnlyTheirRequest) {
  SchedulerOptions o;
  o.max_batch = 6;
  o.prefill_chunk = 8;
  Scheduler sched(*model_, o);
  Batch batch;
  Stream& healthy = batch.add(prompt(11, 80), 6);
  Stream& bad_admit = batch.add(prompt(5, 81), 6);
  batch.reqs.back().on_admitted = [](int64_t) { throw Error("admission hook broke"); };
  Stream& bad_token = batch.add(prompt(9, 82), 6);
  bad_token.hook = [&bad_token](int32_t) {
    if (bad_token.tokens.size() == 2) throw Error("client write broke");
    return true;
  };
  Stream& bad_logprobs = batch.add(prompt(7, 83), 6);
  batch.reqs.back().top_logprobs = 2;
  batch.reqs.back().on_logprobs = [n = 0](int32_t, const TokenLogprobs&) mutable {
    if (++n == 3) throw Error("logprobs sink broke");
  };
  Stream& bad_constraint = batch.add(prompt(6, 84), 6);
  batch.reqs.back().constraint = std::make_shared<ThrowingConstraint>(4);
  // on_done throwing has nobody left to tell: the engine swallows it and goes on.
  Stream& bad_done = batch.add(prompt(4, 85), 3);
  batch.reqs.back().on_done = [&bad_done](const RequestResult& r) {
    bad_done.done.set_value(r);
    throw Error("done hook broke");
  };
  batch.submit_all(sched);

  const RequestResult ok = healthy.result.get();
  EXPECT_STREQ(to_string(ok.reason), "length");
  EXPECT_EQ(healthy.tokens, lone(batch.reqs[0], o.prefill_chunk));

  auto expect_error = [](Stream& s, const char* says, int64_t tokens) {
    const RequestResult r = s.result.get();
    EXPECT_STREQ(to_string(r.reason), "error") << says;
    EXPECT_NE(r.error.find(says), std::string::npos) << r.error;
    EXPECT_EQ(r.completion_tokens, tokens) << says;
  };
  expect_error(bad_admit, "on_admitted failed: admission hook broke", 0);
  EXPECT_TRUE(bad_admit.tokens.empty());
  // A token counts once it reached a callback, even the one that threw.
  expect_error(bad_token, "on_token failed: client write broke", 2);
  expect_error(bad_logprobs, "on_token failed: logprobs sink broke", 3);
  EXPECT_EQ(bad_logprobs.tokens.size(), 2u);
  expect_error(bad_constraint, "constrained decoding failed: grammar broke", 3);
  EXPECT_EQ(bad_constraint.tokens.size(), 3u);
  const RequestResult done = bad_done.result.get();
  EXPECT_STREQ(to_string(done.reason), "length");

  // The engine still serves, with lone results, and the counters add up.
  EXPECT_STREQ(to_string(run_checked(sched, prompt(10, 86), 4).reason), "length");
  const SchedulerStats st = sched.stats();
  EXPECT_EQ(st.failed, 4);
  EXPECT_EQ(st.completed, 3);
  EXPECT_EQ(st.running + st.waiting, 0);
  EXPECT_EQ(st.reserved_bytes, 0u);
}

}  // namespace
}  // namespace k3
