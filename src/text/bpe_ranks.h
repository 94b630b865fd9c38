// The ordinary (non-special) vocabulary of a tiktoken-style byte-level BPE: token bytes <-> rank.
// Token id == rank; there is no merge list, a merge exists exactly when the concatenation of two
// adjacent parts is itself a token (its rank is its merge priority, lower first).
//
// File format (tiktoken.model / *.tiktoken): one line per token, "<base64 of the raw token bytes>
// <rank>\n".  Ranks need not be contiguous (the unused ones below the highest may number at most
// the tokens plus 65,536), but bytes and ranks must be unique.
//
// Lookups go through a flat open-addressing hash table; a token of up to 8 bytes is matched inside
// its slot (no arena access), longer ones by hash and then memcmp; one- and two-byte tokens use
// direct tables.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace k3 {

class BpeRanks {
 public:
  BpeRanks() = default;
  // tokens[r] = the bytes of rank r (empty string = no token with that rank).
  explicit BpeRanks(const std::vector<std::string>& tokens_by_rank);

  // Parses a tiktoken rank file; throws k3::Error naming the file and line.
  static BpeRanks load_tiktoken(const std::string& path);
  static BpeRanks parse_tiktoken(std::string_view text, const std::string& source_name);
  // The tiktoken text form (ranks ascending).
  std::string to_tiktoken() const;

  // Rank of exactly these bytes, or -1.
  int32_t rank(std::string_view bytes) const;
  int32_t byte_rank(unsigned char b) const { return byte_rank_[b]; }
  // Bytes of a rank; empty for a rank that does not exist.
  std::string_view bytes(int32_t rank) const;
  bool has_rank(int32_t rank) const { return rank >= 0 && rank < static_cast<int32_t>(offsets_.size()) && lengths_[rank] > 0; }

  // Highest rank + 1 (ids of ordinary tokens lie below this).
  int32_t end_rank() const { return static_cast<int32_t>(offsets_.size()); }
  // Number of tokens.
  size_t size() const { return count_; }

 private:
  // A hash-table entry: tokens of up to 8 bytes are compared in the slot itself (`key` = the bytes),
  // longer ones by `key` = their hash and then the arena.
  struct Slot {
    uint64_t key = 0;
    uint32_t length = 0;
    int32_t rank = -1;  // -1 = empty
  };
  void insert(int32_t rank, std::string_view bytes, const std::string& source_name);
  size_t find_slot(std::string_view bytes) const;

  std::string arena_;              // all token bytes, concatenated
  std::vector<uint32_t> offsets_;  // per rank: offset into arena_
  std::vector<uint32_t> lengths_;  // per rank: byte length (0 = absent)
  std::vector<Slot> slots_;        // open addressing, linear probing; size is a power of two
  std::vector<int32_t> byte_rank_ = std::vector<int32_t>(256, -1);
  std::vector<int32_t> pair_rank_ = std::vector<int32_t>(65536, -1);  // two-byte tokens, direct
  size_t count_ = 0;
};

}  // namespace k3
