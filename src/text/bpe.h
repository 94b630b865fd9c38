// Byte-level BPE of one pre-tokenized piece, exactly as tiktoken does it: if the piece's bytes are
// a whole token, that id; otherwise start from single bytes and repeatedly merge the adjacent pair
// whose concatenation has the lowest rank (leftmost on ties) until no adjacent pair is a token.
//
// Short pieces use a direct scan; long ones a min-heap over a linked list of parts with lazy
// invalidation, so the cost is O(n log n) in the piece length (a 1 MB piece takes milliseconds).
// Both paths pick the same (rank, position) minimum at every step, so they give identical ids.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "text/bpe_ranks.h"

namespace k3 {

// Appends the ids of `piece` to `out`.  Throws k3::Error if a byte of the piece has no token.
void bpe_encode_piece(std::string_view piece, const BpeRanks& ranks, std::vector<int32_t>& out);

}  // namespace k3
