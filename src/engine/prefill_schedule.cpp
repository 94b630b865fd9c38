#include "engine/prefill_schedule.h"

#include <algorithm>

#include "kernels/mla_prefill.h"
#include "model/k3_model.h"

namespace k3 {

int64_t PrefillSchedule::length(int64_t pos, int64_t n, std::initializer_list<int64_t> stops) const {
  int64_t len = chunk;
  while (len * 2 <= chunk_max && len * kDepthPerToken < pos) len *= 2;
  // To the next multiple of len: a segment that starts off len's grid (after a store point or a
  // cached prefix) ends where an aligned one would.
  int64_t end = std::min(n, (pos / len + 1) * len);
  for (int64_t s : stops)
    if (s > pos) end = std::min(end, s);
  return end - pos;
}

bool prefill_growth_keeps_results(const Model& model, int64_t chunk, int64_t chunk_max) {
  if (chunk_max <= chunk) return true;
  // The KDA chunks of a segment start at its first token: the segments' grid must be theirs
  // (the vector kernels round the chunk up to a multiple of 16; token by token, any grid is).
  const KdaOptions& kda = model.options().kda;
  const int64_t kda_chunk = std::max(1, kda.chunk), kda_vector_chunk = (kda_chunk + 15) / 16 * 16;
  if (!kda.force_recurrent && (chunk % kda_chunk != 0 || chunk % kda_vector_chunk != 0)) return false;
  const TextConfig& c = model.text();
  if (model.options().mla.mode != MlaMode::kAuto ||
      std::find(c.layer_kinds.begin(), c.layer_kinds.end(), LayerKind::kMla) == c.layer_kinds.end())
    return true;
  // For a segment length, the two forms' costs are linear in the depth, so the form chosen at
  // depth 0 and at the deepest start holds in between.
  const MlaPrefillShape shape{c.num_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank};
  const int64_t deepest = c.max_position_embeddings;
  for (int64_t len = chunk; len <= chunk_max; len += chunk)
    if (!mla_prefill_prefers_decompressed(shape, 0, len) || !mla_prefill_prefers_decompressed(shape, deepest, len))
      return false;
  return true;
}

}  // namespace k3
