#include "text/bpe.h"

#include <algorithm>
#include <array>
#include <limits>
#include <queue>

#include "base/error.h"

namespace k3 {
namespace {

constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
constexpr size_t kSmallPiece = 48;

void emit(std::string_view part, const BpeRanks& ranks, std::vector<int32_t>& out) {
  const int32_t id = ranks.rank(part);
  K3_CHECK(id >= 0, "tokenizer: byte 0x", std::hex, int(static_cast<unsigned char>(part[0])),
           " has no token in the vocabulary");
  out.push_back(id);
}

// tiktoken's own algorithm: parts[i] = start of part i and the rank of merging parts i and i+1.
void merge_small(std::string_view piece, const BpeRanks& ranks, std::vector<int32_t>& out) {
  struct Part {
    uint32_t start;
    int32_t rank;
  };
  std::array<Part, kSmallPiece + 1> parts;
  size_t count = piece.size() + 1;  // the last entry is the end sentinel
  for (size_t i = 0; i < count; ++i) parts[i] = {static_cast<uint32_t>(i), kNone};
  const auto pair_rank = [&](size_t i) -> int32_t {
    if (i + 2 >= count) return kNone;
    const int32_t r = ranks.rank(piece.substr(parts[i].start, parts[i + 2].start - parts[i].start));
    return r < 0 ? kNone : r;
  };
  for (size_t i = 0; i + 1 < count; ++i) parts[i].rank = pair_rank(i);
  while (count > 2) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < count; ++i)
      if (parts[i].rank < parts[best].rank) best = i;
    if (parts[best].rank == kNone) break;
    for (size_t i = best + 1; i + 1 < count; ++i) parts[i] = parts[i + 1];
    --count;
    parts[best].rank = pair_rank(best);
    if (best > 0) parts[best - 1].rank = pair_rank(best - 1);
  }
  for (size_t i = 0; i + 1 < count; ++i)
    emit(piece.substr(parts[i].start, parts[i + 1].start - parts[i].start), ranks, out);
}

// Candidate pairs of one rank, drained in position order.
struct Bucket {
  struct Entry {
    uint32_t left, right_end;  // the pair (left, left.next) while left.next still ends at right_end
  };
  std::vector<Entry> entries;
  size_t next = 0;
  bool sorted = true;
  bool empty() const { return next == entries.size(); }
};

// rank -> Bucket, open addressing; remembers the last rank asked for (runs repeat ranks a lot).
class BucketMap {
 public:
  BucketMap() : keys_(64, -1), slot_bucket_(64, 0) {}
  Bucket& operator[](int32_t rank) {
    if (rank == last_rank_) return buckets_[last_bucket_];
    size_t mask = keys_.size() - 1, i = (static_cast<uint32_t>(rank) * 0x9E3779B1u) & mask;
    while (keys_[i] != rank && keys_[i] >= 0) i = (i + 1) & mask;
    if (keys_[i] < 0) {
      if ((buckets_.size() + 1) * 2 > keys_.size()) {
        grow();
        return (*this)[rank];
      }
      keys_[i] = rank;
      slot_bucket_[i] = static_cast<uint32_t>(buckets_.size());
      buckets_.emplace_back();
    }
    last_rank_ = rank;
    last_bucket_ = slot_bucket_[i];
    return buckets_[last_bucket_];
  }

 private:
  void grow() {
    std::vector<int32_t> keys(keys_.size() * 2, -1);
    std::vector<uint32_t> slot_bucket(keys.size(), 0);
    const size_t mask = keys.size() - 1;
    for (size_t j = 0; j < keys_.size(); ++j) {
      if (keys_[j] < 0) continue;
      size_t i = (static_cast<uint32_t>(keys_[j]) * 0x9E3779B1u) & mask;
      while (keys[i] >= 0) i = (i + 1) & mask;
      keys[i] = keys_[j];
      slot_bucket[i] = slot_bucket_[j];
    }
    keys_ = std::move(keys);
    slot_bucket_ = std::move(slot_bucket);
  }

  std::vector<int32_t> keys_;
  std::vector<uint32_t> slot_bucket_;
  std::vector<Bucket> buckets_;  // references die when this grows: never hold one across operator[]
  int32_t last_rank_ = -1;
  uint32_t last_bucket_ = 0;
};

// The same merge order for long pieces.  Node i is the part that starts at byte i.  Candidate
// pairs wait in one bucket per rank, and the buckets in a min-heap of ranks; a bucket is taken in
// position order (leftmost first), so merges happen in exactly the (rank, position) order of the
// scan above.  A merge at rank r only creates pairs whose bytes are longer than r's token, so a
// bucket never grows while it is being drained; a lower-rank pair created on the way pre-empts it
// (the heap top changes) and the bucket resumes later, re-sorted if it grew meanwhile.  Draining
// runs left to right through the nodes, which keeps this cache-friendly; O(n log n) overall.
void merge_large(std::string_view piece, const BpeRanks& ranks, std::vector<int32_t>& out) {
  const uint32_t n = static_cast<uint32_t>(piece.size());
  struct Node {
    uint32_t end;   // one past the last byte
    uint32_t next;  // start of the next part (n = none)
    uint32_t prev;  // start of the previous part (n = none)
    bool alive;
  };
  std::vector<Node> nodes(n);
  for (uint32_t i = 0; i < n; ++i) nodes[i] = {i + 1, i + 1, i == 0 ? n : i - 1, true};
  BucketMap buckets;
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<int32_t>> pending;  // ranks of non-empty buckets
  const auto push = [&](uint32_t left) {
    if (left >= n) return;
    const uint32_t right = nodes[left].next;
    if (right >= n) return;
    const int32_t r = ranks.rank(piece.substr(left, nodes[right].end - left));
    if (r < 0) return;
    Bucket& b = buckets[r];
    if (b.empty()) {
      b.entries.clear();
      b.next = 0;
      b.sorted = true;
      pending.push(r);
    } else if (left < b.entries.back().left) {
      b.sorted = false;
    }
    b.entries.push_back({left, nodes[right].end});
  };
  for (uint32_t i = 0; i + 1 < n; ++i) push(i);
  while (!pending.empty()) {
    const int32_t r = pending.top();
    Bucket& b = buckets[r];
    if (!b.sorted) {
      std::sort(b.entries.begin() + static_cast<std::ptrdiff_t>(b.next), b.entries.end(),
                [](const Bucket::Entry& x, const Bucket::Entry& y) { return x.left < y.left; });
      b.sorted = true;
    }
    const Bucket::Entry e = b.entries[b.next++];
    if (b.empty()) pending.pop();
    Node& l = nodes[e.left];
    if (!l.alive || l.next >= n || nodes[l.next].end != e.right_end) continue;  // stale
    Node& right = nodes[l.next];
    l.end = right.end;
    l.next = right.next;
    right.alive = false;
    if (l.next < n) nodes[l.next].prev = e.left;
    push(e.left);
    push(l.prev);
  }
  for (uint32_t i = 0; i < n; i = nodes[i].next) emit(piece.substr(i, nodes[i].end - i), ranks, out);
}

}  // namespace

void bpe_encode_piece(std::string_view piece, const BpeRanks& ranks, std::vector<int32_t>& out) {
  if (piece.empty()) return;
  const int32_t whole = ranks.rank(piece);
  if (whole >= 0) {
    out.push_back(whole);
    return;
  }
  if (piece.size() <= kSmallPiece) {
    merge_small(piece, ranks, out);
  } else {
    merge_large(piece, ranks, out);
  }
}

}  // namespace k3
