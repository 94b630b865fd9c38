// Everything one sequence carries between forward calls: per KDA layer the fp32 recurrent
// state (heads x K x V, key-major: S[k][v], see kernels/kda.h) and the short-conv history (the last W-1 raw q/k/v
// projections), per MLA layer the latent cache (576-wide rows in K3: kv_a_layernorm(c_kv) then
// k_rope), and the number of tokens consumed.  AttnRes needs no cross-token state.
//
// The latent cache is fp32 (exact, the default) or, opt-in, bf16 (rounded to nearest even when
// a row is appended; half the bytes per token of context, widened exactly when read).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/aligned.h"
#include "model/k3_config.h"

namespace k3 {

// 64-byte aligned (base/aligned.h): the kernels stream these with 64-byte vector loads.
struct KdaLayerState {
  AlignedVector<float> recurrent;  // [H][V][K]
  std::vector<float> conv_q, conv_k, conv_v;  // [W-1][P] each, oldest row first
};

enum class CacheDtype { kF32, kBf16 };
const char* cache_dtype_name(CacheDtype d);
// "f32" / "fp32" / "bf16"; throws k3::Error naming the accepted values.
CacheDtype parse_cache_dtype(const std::string& s);
// The process-wide choice (k3 --kv-cache-dtype, or K3_KV_CACHE_DTYPE); kF32 unless set.
void set_default_cache_dtype(CacheDtype d);
CacheDtype default_cache_dtype();

// Exactly one of the two holds the rows, by the sequence's CacheDtype.
struct MlaLayerState {
  AlignedVector<float> latent;          // [len][kv_lora + rope]  (kF32)
  AlignedVector<uint16_t> latent_bf16;  // [len][kv_lora + rope]  (kBf16)
};

class SequenceState {
 public:
  SequenceState() = default;
  // max_tokens: the context limit this sequence may grow to.  Nothing is reserved for it up
  // front: the latent caches grow with the tokens consumed.
  SequenceState(const TextConfig& config, int64_t max_tokens, CacheDtype cache = CacheDtype::kF32);
  // Copies, moves and destruction are those of the members; on rank 0 of a multi-rank server
  // they are also recorded for the other ranks (model/state_mirror.h).
  SequenceState(const SequenceState& other);
  SequenceState(SequenceState&& other) noexcept;
  SequenceState& operator=(const SequenceState& other);
  SequenceState& operator=(SequenceState&& other) noexcept;
  ~SequenceState();

  void reset();
  // Takes over what `other` has consumed (states, caches, position), keeping this sequence's
  // max_tokens.  Throws k3::Error when the two come from different layer layouts or cache
  // dtypes, or `other` already holds more than max_tokens tokens.
  void assign_contents(const SequenceState& other);
  int64_t position() const { return position_; }
  int64_t max_tokens() const { return max_tokens_; }
  CacheDtype cache_dtype() const { return cache_; }
  // Whether a token just sampled from this state fills the context: it is token position() + 1,
  // and prompt + output may hold at most max_tokens() tokens, so generation stops there.
  bool full_with_sampled_token() const { return position_ + 1 >= max_tokens_; }
  // This state's id among the ranks (model/state_mirror.h); 0 when not recorded.
  uint64_t mirror_id() const { return mirror_id_; }
  // Bytes currently held (states + caches).
  uint64_t bytes() const;
  // What a sequence of `tokens` tokens of context holds: the fixed KDA part plus, per token, one
  // latent row per MLA layer (k3 inspect, the server's memory budget).
  static uint64_t fixed_bytes(const TextConfig& config);
  static uint64_t bytes_per_token(const TextConfig& config, CacheDtype cache);

  // Used by the model's layers; index = the layer's ordinal among its kind.
  std::vector<KdaLayerState> kda;
  std::vector<MlaLayerState> mla;

 private:
  friend class Model;
  int64_t position_ = 0;
  int64_t max_tokens_ = 0;
  CacheDtype cache_ = CacheDtype::kF32;
  uint64_t mirror_id_ = 0;
};

}  // namespace k3
