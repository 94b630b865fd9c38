#include "engine/prefix_cache.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace k3 {
namespace {

// The overrides of `key` at positions below `len`: how many there are.
size_t overrides_below(const PrefixKey& key, int64_t len) {
  return static_cast<size_t>(std::lower_bound(key.media_positions.begin(), key.media_positions.end(), len) -
                             key.media_positions.begin());
}

}  // namespace

bool same_prefix(const PrefixKey& a, const PrefixKey& b, int64_t len) {
  const auto n = static_cast<size_t>(len);
  if (a.tokens.size() < n || b.tokens.size() < n || !std::equal(a.tokens.begin(), a.tokens.begin() + len, b.tokens.begin()))
    return false;
  const size_t m = overrides_below(a, len);
  if (m != overrides_below(b, len) || !std::equal(a.media_positions.begin(), a.media_positions.begin() + static_cast<std::ptrdiff_t>(m),
                                                  b.media_positions.begin()))
    return false;
  return m == 0 || std::memcmp(a.media_rows.data(), b.media_rows.data(), m * a.hidden * sizeof(float)) == 0;
}

int64_t PrefixCache::shared_prefix(const PrefixKey& key) const {
  int64_t best = 0;
  for (const Entry& e : entries_) {
    const size_t n = std::min(e.tokens.size(), key.tokens.size());
    int64_t len = std::mismatch(e.tokens.begin(), e.tokens.begin() + static_cast<std::ptrdiff_t>(n), key.tokens.begin()).first -
                  e.tokens.begin();
    // Cut at the first override that differs (position or row) below len.
    for (size_t j = 0;; ++j) {
      const int64_t pe = j < e.media_positions.size() ? e.media_positions[j] : len;
      const int64_t pk = j < key.media_positions.size() ? key.media_positions[j] : len;
      if (std::min(pe, pk) >= len) break;
      if (pe != pk || std::memcmp(e.media_rows.data() + j * key.hidden, key.media_rows.data() + j * key.hidden,
                                  key.hidden * sizeof(float)) != 0) {
        len = std::min(pe, pk);
        break;
      }
    }
    best = std::max(best, len);
  }
  return best;
}

int64_t PrefixCache::restore(const PrefixKey& prompt, SequenceState* state) {
  auto best = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const int64_t len = static_cast<int64_t>(it->tokens.size());
    if (len >= static_cast<int64_t>(prompt.tokens.size()) || len > state->max_tokens()) continue;
    if ((best == entries_.end() || len > static_cast<int64_t>(best->tokens.size())) && is_prefix(*it, prompt)) best = it;
  }
  if (best == entries_.end()) {
    ++stats_.misses;
    return 0;
  }
  state->assign_contents(best->state);
  entries_.splice(entries_.begin(), entries_, best);
  const int64_t len = static_cast<int64_t>(best->tokens.size());
  ++stats_.hits;
  stats_.tokens_reused += len;
  return len;
}

void PrefixCache::store(const PrefixKey& prefix, const SequenceState& state) {
  const int64_t len = static_cast<int64_t>(prefix.tokens.size());
  K3_CHECK(len == state.position(), "a prefix of ", len, " tokens stored with a state at position ", state.position());
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (static_cast<int64_t>(it->tokens.size()) == len && is_prefix(*it, prefix)) {
      entries_.splice(entries_.begin(), entries_, it);
      return;
    }
  }
  const size_t n = overrides_below(prefix, len);
  Entry e;
  e.state = state;  // the copy holds no spare capacity, so its bytes() is what the entry keeps
  e.bytes = e.state.bytes() + static_cast<uint64_t>(len) * sizeof(int32_t) + n * sizeof(int64_t) +
            n * prefix.hidden * sizeof(float);
  if (e.bytes > budget_) return;
  // Every copy before the first eviction: an allocation that fails leaves the cache as it was.
  e.hidden = prefix.hidden;
  e.tokens.assign(prefix.tokens.begin(), prefix.tokens.end());
  e.media_positions.assign(prefix.media_positions.begin(), prefix.media_positions.begin() + static_cast<std::ptrdiff_t>(n));
  e.media_rows.assign(prefix.media_rows.begin(), prefix.media_rows.begin() + static_cast<std::ptrdiff_t>(n * prefix.hidden));
  while (!entries_.empty() && stats_.bytes + e.bytes > budget_) {
    stats_.bytes -= entries_.back().bytes;
    entries_.pop_back();
    ++stats_.evictions;
  }
  const uint64_t bytes = e.bytes;
  entries_.push_front(std::move(e));
  stats_.bytes += bytes;
}

}  // namespace k3
