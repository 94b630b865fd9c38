#include "model/sequence_state.h"

#include <algorithm>

#include "base/error.h"

namespace k3 {

SequenceState::SequenceState(const TextConfig& c, int64_t max_tokens) : max_tokens_(max_tokens) {
  const size_t P = static_cast<size_t>(c.kda_width());
  const size_t hist = static_cast<size_t>(c.kda.conv_kernel - 1) * P;
  for (LayerKind k : c.layer_kinds) {
    if (k == LayerKind::kKda) {
      KdaLayerState s;
      s.recurrent.assign(static_cast<size_t>(c.kda.num_heads) * c.kda.head_dim * c.kda.head_dim, 0.0f);
      s.conv_q.assign(hist, 0.0f);
      s.conv_k.assign(hist, 0.0f);
      s.conv_v.assign(hist, 0.0f);
      kda.push_back(std::move(s));
    } else {
      mla.emplace_back();
    }
  }
}

void SequenceState::reset() {
  for (KdaLayerState& s : kda) {
    std::fill(s.recurrent.begin(), s.recurrent.end(), 0.0f);
    std::fill(s.conv_q.begin(), s.conv_q.end(), 0.0f);
    std::fill(s.conv_k.begin(), s.conv_k.end(), 0.0f);
    std::fill(s.conv_v.begin(), s.conv_v.end(), 0.0f);
  }
  for (MlaLayerState& s : mla) {
    s.latent.clear();
    s.latent.shrink_to_fit();
  }
  position_ = 0;
}

void SequenceState::assign_contents(const SequenceState& other) {
  K3_CHECK(kda.size() == other.kda.size() && mla.size() == other.mla.size(), "sequence state layouts differ: ",
           kda.size(), " KDA + ", mla.size(), " MLA layers against ", other.kda.size(), " + ", other.mla.size());
  for (size_t i = 0; i < kda.size(); ++i)
    K3_CHECK(kda[i].recurrent.size() == other.kda[i].recurrent.size() && kda[i].conv_q.size() == other.kda[i].conv_q.size(),
             "sequence state layouts differ in KDA layer ", i);
  K3_CHECK(max_tokens_ <= 0 || other.position_ <= max_tokens_, "a state of ", other.position_,
           " tokens does not fit a sequence of at most ", max_tokens_);
  kda = other.kda;
  mla = other.mla;
  position_ = other.position_;
}

uint64_t SequenceState::bytes() const {
  uint64_t n = 0;
  for (const KdaLayerState& s : kda)
    n += (s.recurrent.size() + s.conv_q.size() + s.conv_k.size() + s.conv_v.size()) * sizeof(float);
  for (const MlaLayerState& s : mla) n += s.latent.capacity() * sizeof(float);
  return n;
}

}  // namespace k3
