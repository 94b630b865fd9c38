// Prompt-prefix cache: copies of sequence states taken after a prompt prefix, so that a later
// request whose prompt starts with that prefix (the next turn of a chat, a shared system
// prompt) skips prefilling it.  KDA layers carry an O(1) recurrent state that cannot be cut
// back to an earlier position, so an entry is usable only for exactly its own prefix length.
//
// Keys are token ids plus the embedding overrides inside the prefix (an image's <|media_pad|>
// rows): an entry matches only where every overridden position and every row value is the same,
// so two images behind identical pad tokens never share a state.
//
// Entries are bounded by a byte budget (their states, MLA caches, tokens and rows) and evicted
// least recently used first.  Not thread-safe: the scheduler uses it from its engine thread.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <vector>

#include "model/sequence_state.h"

namespace k3 {

// A prompt prefix as the cache sees it: tokens, and the overrides among them (strictly
// increasing positions, `hidden` floats per row).
struct PrefixKey {
  std::span<const int32_t> tokens;
  std::span<const int64_t> media_positions;
  std::span<const float> media_rows;
  size_t hidden = 0;
};

// Whether a and b agree on their first len tokens: the tokens, and the overrides (positions and
// rows) among them.  False when either holds fewer than len tokens.
bool same_prefix(const PrefixKey& a, const PrefixKey& b, int64_t len);

struct PrefixCacheStats {
  int64_t entries = 0;
  uint64_t bytes = 0;
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t tokens_reused = 0;  // prompt tokens not prefilled thanks to hits
  int64_t evictions = 0;
};

class PrefixCache {
 public:
  explicit PrefixCache(uint64_t budget_bytes) : budget_(budget_bytes) {}

  // The longest entry that is a prefix of `prompt` and shorter than it (a request needs at
  // least one token to prefill for its first logits).  On a hit, *state takes over the entry's
  // contents (keeping its max_tokens) and the length is returned; on a miss, 0 and *state is
  // untouched.  Entries longer than state->max_tokens() are skipped.
  int64_t restore(const PrefixKey& prompt, SequenceState* state);

  // The longest prefix of `key` that some entry shares (tokens, and image rows at overridden
  // positions), whatever that entry's own length: where two prompts diverge.  The scheduler
  // stores a state there too, so a prefix shared by several prompts (a system prompt) is cached
  // at its second use and hit from the third.
  int64_t shared_prefix(const PrefixKey& key) const;

  // Stores a copy of `state` as the state after prefix.tokens (whose length must be
  // state.position()).  An identical key only refreshes its entry; an entry larger than the
  // whole budget is not stored.  Evicts least recently used entries to stay within the budget.
  void store(const PrefixKey& prefix, const SequenceState& state);

  uint64_t budget() const { return budget_; }
  PrefixCacheStats stats() const {
    PrefixCacheStats s = stats_;
    s.entries = static_cast<int64_t>(entries_.size());
    return s;
  }

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::vector<int64_t> media_positions;
    std::vector<float> media_rows;
    size_t hidden = 0;
    SequenceState state;
    uint64_t bytes = 0;
    PrefixKey key() const { return {tokens, media_positions, media_rows, hidden}; }
  };

  // Whether `e` is a prefix of `key` (tokens and overrides inside e's length).
  static bool is_prefix(const Entry& e, const PrefixKey& key) {
    return same_prefix(e.key(), key, static_cast<int64_t>(e.tokens.size()));
  }

  uint64_t budget_;
  std::list<Entry> entries_;  // most recently used first
  PrefixCacheStats stats_;
};

}  // namespace k3
