// The server and `k3 chat` over several ranks: rank 0 runs the front (HTTP or the terminal), the
// scheduler and sampling; every other rank follows.  Before each forward step, rank 0 broadcasts
// what the followers need to run the same step on the same states: the sequence-state
// operations since the last step (created, copied, assigned, reset, destroyed; each state has an
// id) and the step's inputs (state ids, tokens, which logits, image embeddings).  A follower
// replays them on its own copies of the states and runs the step, taking part in its exchanges
// (dist/world.h); it ends when rank 0 broadcasts the stop.
//
// Recording is on only on rank 0 of a multi-rank run, after enable(); elsewhere every hook is a
// no-op returning id 0, and states carry no id.
#pragma once

#include <cstdint>
#include <span>

#include "model/sequence_state.h"

namespace k3 {

class Model;
struct SequenceInput;

namespace mirror {

// Rank 0 of several ranks: records state operations and sends steps from now on.
void enable();
bool active();

// Hooks for SequenceState (ids are 0 when not recording, and for empty states).
uint64_t on_create(int64_t max_tokens, CacheDtype cache);
uint64_t on_copy(uint64_t src);
// A whole-state copy assignment: returns the destination's id afterwards.
uint64_t on_assign(uint64_t dst, uint64_t src);
void on_destroy(uint64_t id);
void on_reset(uint64_t id);
void on_assign_contents(uint64_t dst, uint64_t src);

// Rank 0, from Model::forward once the step is validated: broadcasts it.  Collective.
void send_step(std::span<const SequenceInput> batch, int64_t hidden);
// Rank 0: ends the followers' loop.  Collective.
void send_stop();

// The other ranks: replays rank 0's steps on `model` until the stop.  Collective.
void follow(const Model& model);

// Sends the stop when it goes out of scope on an active rank 0 (the front has finished).
struct StopOnExit {
  ~StopOnExit();
};

}  // namespace mirror
}  // namespace k3
