// Everything one sequence carries between forward calls: per KDA layer the fp32 recurrent
// state (heads x V x K, V-first) and the short-conv history (the last W-1 raw q/k/v
// projections), per MLA layer the latent cache (576-wide rows in K3: kv_a_layernorm(c_kv) then
// k_rope), and the number of tokens consumed.  AttnRes needs no cross-token state.
#pragma once

#include <cstdint>
#include <vector>

#include "base/aligned.h"
#include "model/k3_config.h"

namespace k3 {

// 64-byte aligned (base/aligned.h): the kernels stream these with 64-byte vector loads.
struct KdaLayerState {
  AlignedVector<float> recurrent;  // [H][V][K]
  std::vector<float> conv_q, conv_k, conv_v;  // [W-1][P] each, oldest row first
};

struct MlaLayerState {
  AlignedVector<float> latent;  // [len][kv_lora + rope]
};

class SequenceState {
 public:
  SequenceState() = default;
  // max_tokens: the context limit this sequence may grow to.
  SequenceState(const TextConfig& config, int64_t max_tokens);

  void reset();
  // Takes over what `other` has consumed (states, caches, position), keeping this sequence's
  // max_tokens.  Throws k3::Error when the two come from different layer layouts or `other`
  // already holds more than max_tokens tokens.
  void assign_contents(const SequenceState& other);
  int64_t position() const { return position_; }
  int64_t max_tokens() const { return max_tokens_; }
  // Whether a token just sampled from this state fills the context: it is token position() + 1,
  // and prompt + output may hold at most max_tokens() tokens, so generation stops there.
  bool full_with_sampled_token() const { return position_ + 1 >= max_tokens_; }
  // Bytes currently held (states + caches).
  uint64_t bytes() const;

  // Used by the model's layers; index = the layer's ordinal among its kind.
  std::vector<KdaLayerState> kda;
  std::vector<MlaLayerState> mla;

 private:
  friend class Model;
  int64_t position_ = 0;
  int64_t max_tokens_ = 0;
};

}  // namespace k3
