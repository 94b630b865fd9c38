// Where the server cuts a prompt into prefill segments (one segment per sequence per step).
//
// Every segment starts and ends on the grid of `chunk` (--prefill-chunk) or at the prompt's
// end, and the prefix cache's store points (multiples of `chunk`) always end one.  Deep in a
// long prompt a segment may be longer than one chunk: each segment decompresses the whole MLA
// latent cache once per head (kernels/mla_prefill.h), work that grows with the depth while the
// segment's other work grows with its length, so segments of one chunk spend more and more of
// a long prompt's prefill decompressing.  A segment starting at position pos covers at least
// pos / kDepthPerToken tokens (chunk x 2^j, at most chunk_max, aligned to its own length):
// at K3's widths that keeps the decompression near a tenth of the weights' FLOPs per prompt
// token (16k deep: 512-token segments, 64k: 2048), while a shallow prompt keeps the chunk, and
// with it the other sequences' decode latency.
//
// Longer segments change no result when every segment on the grid runs the same MLA form and
// starts on a KDA chunk boundary (chunked prefill is then bit-identical to one call, as
// tests/model/consistency_test.cpp checks); prefill_growth_keeps_results() checks that, and the
// scheduler grows segments only where it holds.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace k3 {

class Model;

struct PrefillSchedule {
  // A segment starting at pos covers at least pos / kDepthPerToken tokens.
  static constexpr int64_t kDepthPerToken = 32;

  int64_t chunk = 256;      // the grid (>= 1)
  int64_t chunk_max = 256;  // the longest segment (<= chunk: every segment is one chunk)

  // Tokens of the segment that starts at pos (a point of the grid, or a store point) in a
  // prompt of n > pos tokens, ending at the first of `stops` (store points) after pos.
  int64_t length(int64_t pos, int64_t n, std::initializer_list<int64_t> stops = {}) const;
};

// Whether segments of any multiple of `chunk` up to chunk_max, at any depth of the model's
// context, give the bits of one-chunk segments: chunk is a multiple of the model's KDA chunk
// (ModelOptions::kda; kKdaChunk unless changed), and the MLA layers run one form for all of
// them (a fixed --mla mode, or under kAuto the decompressed form at every such length and depth).
bool prefill_growth_keeps_results(const Model& model, int64_t chunk, int64_t chunk_max);

}  // namespace k3
