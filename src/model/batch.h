// How the rows of one forward call's activation matrix map to sequences: rows are grouped by
// sequence, in order, each group continuing its sequence at `pos0`.  Token-wise ops (norms,
// projections, MoE) see all rows at once; sequence ops (KDA, MLA, conv) walk the segments.
#pragma once

#include <cstdint>
#include <vector>

#include "model/sequence_state.h"

namespace k3 {

struct BatchSegment {
  SequenceState* state = nullptr;
  int64_t row0 = 0;  // first row in the activation matrix
  int64_t len = 0;   // number of new tokens
  int64_t pos0 = 0;  // tokens the sequence had already consumed
};

struct BatchLayout {
  std::vector<BatchSegment> segments;
  int64_t rows = 0;
};

// Optional per-layer intermediates, for tests against the fixtures' debug tensors.
struct ForwardTrace {
  std::vector<std::vector<float>> attn_out;  // [layer][rows * hidden]: attention sublayer output (after o_proj)
  std::vector<std::vector<float>> ffn_out;   // [layer][rows * hidden]: dense MLP / MoE output
  std::vector<std::vector<int32_t>> routes;  // [layer][rows * top_k], selection order; empty for dense layers
  std::vector<float> final_hidden;           // [rows * hidden]: final mix, before the last norm
};

}  // namespace k3
