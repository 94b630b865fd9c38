#include "text/bpe_ranks.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <cstring>

#include "base/error.h"
#include "io/checkpoint.h"
#include "text/base64.h"

namespace k3 {
namespace {

// Up to 8 bytes, little-endian, zero-padded.
inline uint64_t pack(std::string_view s) {
  uint64_t v = 0;
  for (size_t k = 0; k < s.size() && k < 8; ++k) v |= uint64_t(static_cast<unsigned char>(s[k])) << (8 * k);
  return v;
}

inline uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 33;
  return h;
}

inline uint64_t hash_bytes(std::string_view s) {
  if (s.size() <= 8) return mix(pack(s) ^ (s.size() * 0x9E3779B97F4A7C15ull));
  const char* p = s.data();
  size_t n = s.size();
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0x2545F4914F6CDD1Dull);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
    p += 8;
    n -= 8;
  }
  uint64_t v = 0;
  std::memcpy(&v, p, n);
  return mix(h ^ v);
}

// What a slot stores as `key` for these bytes.
inline uint64_t slot_key(std::string_view s, uint64_t hash) { return s.size() <= 8 ? pack(s) : hash; }

inline size_t pair_index(std::string_view two) {
  return (size_t(static_cast<unsigned char>(two[0])) << 8) | static_cast<unsigned char>(two[1]);
}

// How many ranks below the highest may be unused beyond one per token (see parse_tiktoken).
constexpr size_t kMaxRankGaps = 65536;

size_t table_size_for(size_t n) {
  size_t size = 16;
  while (size < n * 2) size <<= 1;
  return size;
}

}  // namespace

BpeRanks::BpeRanks(const std::vector<std::string>& tokens_by_rank) {
  offsets_.assign(tokens_by_rank.size(), 0);
  lengths_.assign(tokens_by_rank.size(), 0);
  slots_.assign(table_size_for(tokens_by_rank.size()), Slot{});
  for (size_t r = 0; r < tokens_by_rank.size(); ++r)
    if (!tokens_by_rank[r].empty()) insert(static_cast<int32_t>(r), tokens_by_rank[r], "token list");
}

size_t BpeRanks::find_slot(std::string_view bytes) const {
  const uint64_t hash = hash_bytes(bytes);
  const uint64_t key = slot_key(bytes, hash);
  const size_t mask = slots_.size() - 1;
  size_t i = hash & mask;
  while (true) {
    const Slot& s = slots_[i];
    if (s.rank < 0) return i;
    if (s.key == key && s.length == bytes.size() &&
        (bytes.size() <= 8 || std::memcmp(arena_.data() + offsets_[s.rank], bytes.data(), bytes.size()) == 0))
      return i;
    i = (i + 1) & mask;
  }
}

void BpeRanks::insert(int32_t rank, std::string_view bytes, const std::string& source_name) {
  K3_CHECK(!bytes.empty(), source_name, ": rank ", rank, " has an empty token");
  K3_CHECK(lengths_[rank] == 0, source_name, ": rank ", rank, " appears twice");
  const size_t slot = find_slot(bytes);
  K3_CHECK(slots_[slot].rank < 0, source_name, ": the token of rank ", rank, " duplicates rank ", slots_[slot].rank);
  K3_CHECK(arena_.size() + bytes.size() < (1ull << 32), source_name, ": vocabulary too large");
  offsets_[rank] = static_cast<uint32_t>(arena_.size());
  lengths_[rank] = static_cast<uint32_t>(bytes.size());
  arena_.append(bytes);
  slots_[slot] = {slot_key(bytes, hash_bytes(bytes)), static_cast<uint32_t>(bytes.size()), rank};
  if (bytes.size() == 1) byte_rank_[static_cast<unsigned char>(bytes[0])] = rank;
  if (bytes.size() == 2) pair_rank_[pair_index(bytes)] = rank;
  ++count_;
}

BpeRanks BpeRanks::load_tiktoken(const std::string& path) { return parse_tiktoken(read_text_file(path), path); }

BpeRanks BpeRanks::parse_tiktoken(std::string_view text, const std::string& source_name) {
  struct Line {
    std::string bytes;
    int32_t rank;
  };
  std::vector<Line> lines;
  int32_t max_rank = -1;
  size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    K3_CHECK(space != std::string_view::npos, source_name, ":", line_no, ": expected '<base64> <rank>'");
    std::optional<std::string> bytes = base64::decode(line.substr(0, space));
    K3_CHECK(bytes.has_value() && !bytes->empty(), source_name, ":", line_no, ": invalid base64 token");
    const std::string_view num = line.substr(space + 1);
    int32_t rank = -1;
    const auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), rank);
    K3_CHECK(ec == std::errc() && ptr == num.data() + num.size() && rank >= 0, source_name, ":", line_no,
             ": invalid rank '", num, "'");
    max_rank = std::max(max_rank, rank);
    lines.push_back({std::move(*bytes), rank});
  }
  K3_CHECK(!lines.empty(), source_name, ": no tokens");
  K3_CHECK(max_rank < (1 << 30), source_name, ": rank ", max_rank, " is too large");
  // The per-rank tables are as long as the highest rank: a one-line file "QQ== 1000000000" would
  // make them 8 GB.  Gaps are allowed, but not more of them than there are tokens (plus a margin).
  const size_t slots = static_cast<size_t>(max_rank) + 1;
  const size_t unused = slots > lines.size() ? slots - lines.size() : 0;  // (repeated ranks are caught below)
  K3_CHECK(unused <= lines.size() + kMaxRankGaps, source_name, ": rank ", max_rank, " leaves ", unused,
           " ranks unused for ", lines.size(), " tokens (at most one unused rank per token, plus ", kMaxRankGaps,
           ", is supported)");
  BpeRanks r;
  r.offsets_.assign(slots, 0);
  r.lengths_.assign(slots, 0);
  r.slots_.assign(table_size_for(lines.size()), Slot{});
  size_t total = 0;
  for (const Line& l : lines) total += l.bytes.size();
  r.arena_.reserve(total);
  for (const Line& l : lines) r.insert(l.rank, l.bytes, source_name);
  return r;
}

std::string BpeRanks::to_tiktoken() const {
  std::string out;
  for (int32_t r = 0; r < end_rank(); ++r) {
    if (lengths_[r] == 0) continue;
    out += base64::encode(bytes(r));
    out += ' ';
    out += std::to_string(r);
    out += '\n';
  }
  return out;
}

int32_t BpeRanks::rank(std::string_view bytes) const {
  if (bytes.size() == 1) return byte_rank_[static_cast<unsigned char>(bytes[0])];
  if (bytes.size() == 2) return pair_rank_[pair_index(bytes)];
  if (slots_.empty() || bytes.empty()) return -1;
  return slots_[find_slot(bytes)].rank;
}

std::string_view BpeRanks::bytes(int32_t rank) const {
  if (!has_rank(rank)) return {};
  return std::string_view(arena_).substr(offsets_[rank], lengths_[rank]);
}

}  // namespace k3
