#include "model/sequence_state.h"

#include "model/state_mirror.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "base/error.h"

namespace k3 {
namespace {

CacheDtype env_cache_dtype() {
  const char* env = std::getenv("K3_KV_CACHE_DTYPE");
  return env && *env ? parse_cache_dtype(env) : CacheDtype::kF32;
}

std::atomic<int> g_cache_dtype{-1};  // -1: not set, read K3_KV_CACHE_DTYPE on first use

}  // namespace

const char* cache_dtype_name(CacheDtype d) { return d == CacheDtype::kBf16 ? "bf16" : "f32"; }

CacheDtype parse_cache_dtype(const std::string& s) {
  if (s == "f32" || s == "fp32") return CacheDtype::kF32;
  if (s == "bf16") return CacheDtype::kBf16;
  throw Error(cat("KV cache dtype '", s, "': expected f32 (exact, default) or bf16"));
}

void set_default_cache_dtype(CacheDtype d) { g_cache_dtype.store(static_cast<int>(d)); }

CacheDtype default_cache_dtype() {
  int v = g_cache_dtype.load();
  if (v < 0) {
    v = static_cast<int>(env_cache_dtype());
    g_cache_dtype.store(v);
  }
  return static_cast<CacheDtype>(v);
}

SequenceState::SequenceState(const TextConfig& c, int64_t max_tokens, CacheDtype cache)
    : max_tokens_(max_tokens), cache_(cache), mirror_id_(mirror::on_create(max_tokens, cache)) {
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

SequenceState::SequenceState(const SequenceState& o)
    : kda(o.kda), mla(o.mla), position_(o.position_), max_tokens_(o.max_tokens_), cache_(o.cache_),
      mirror_id_(mirror::on_copy(o.mirror_id_)) {}

SequenceState::SequenceState(SequenceState&& o) noexcept
    : kda(std::move(o.kda)), mla(std::move(o.mla)), position_(o.position_), max_tokens_(o.max_tokens_),
      cache_(o.cache_), mirror_id_(o.mirror_id_) {
  o.mirror_id_ = 0;
}

SequenceState& SequenceState::operator=(const SequenceState& o) {
  if (this == &o) return *this;
  kda = o.kda;
  mla = o.mla;
  position_ = o.position_;
  max_tokens_ = o.max_tokens_;
  cache_ = o.cache_;
  mirror_id_ = mirror::on_assign(mirror_id_, o.mirror_id_);
  return *this;
}

SequenceState& SequenceState::operator=(SequenceState&& o) noexcept {
  if (this == &o) return *this;
  kda = std::move(o.kda);
  mla = std::move(o.mla);
  position_ = o.position_;
  max_tokens_ = o.max_tokens_;
  cache_ = o.cache_;
  mirror::on_destroy(mirror_id_);
  mirror_id_ = o.mirror_id_;
  o.mirror_id_ = 0;
  return *this;
}

SequenceState::~SequenceState() { mirror::on_destroy(mirror_id_); }

void SequenceState::reset() {
  mirror::on_reset(mirror_id_);
  for (KdaLayerState& s : kda) {
    std::fill(s.recurrent.begin(), s.recurrent.end(), 0.0f);
    std::fill(s.conv_q.begin(), s.conv_q.end(), 0.0f);
    std::fill(s.conv_k.begin(), s.conv_k.end(), 0.0f);
    std::fill(s.conv_v.begin(), s.conv_v.end(), 0.0f);
  }
  for (MlaLayerState& s : mla) {
    s.latent.clear();
    s.latent.shrink_to_fit();
    s.latent_bf16.clear();
    s.latent_bf16.shrink_to_fit();
  }
  position_ = 0;
}

void SequenceState::assign_contents(const SequenceState& other) {
  K3_CHECK(kda.size() == other.kda.size() && mla.size() == other.mla.size(), "sequence state layouts differ: ",
           kda.size(), " KDA + ", mla.size(), " MLA layers against ", other.kda.size(), " + ", other.mla.size());
  for (size_t i = 0; i < kda.size(); ++i)
    K3_CHECK(kda[i].recurrent.size() == other.kda[i].recurrent.size() && kda[i].conv_q.size() == other.kda[i].conv_q.size(),
             "sequence state layouts differ in KDA layer ", i);
  K3_CHECK(cache_ == other.cache_, "sequence states differ in their latent cache dtype: ", cache_dtype_name(cache_),
           " against ", cache_dtype_name(other.cache_));
  K3_CHECK(max_tokens_ <= 0 || other.position_ <= max_tokens_, "a state of ", other.position_,
           " tokens does not fit a sequence of at most ", max_tokens_);
  kda = other.kda;
  mla = other.mla;
  position_ = other.position_;
  mirror::on_assign_contents(mirror_id_, other.mirror_id_);
}

uint64_t SequenceState::bytes() const {
  uint64_t n = 0;
  for (const KdaLayerState& s : kda)
    n += (s.recurrent.size() + s.conv_q.size() + s.conv_k.size() + s.conv_v.size()) * sizeof(float);
  for (const MlaLayerState& s : mla)
    n += s.latent.capacity() * sizeof(float) + s.latent_bf16.capacity() * sizeof(uint16_t);
  return n;
}

uint64_t SequenceState::fixed_bytes(const TextConfig& c) {
  const uint64_t kda = static_cast<uint64_t>(c.kda.num_heads) * c.kda.head_dim * c.kda.head_dim +
                       3ull * (c.kda.conv_kernel - 1) * c.kda_width();
  return static_cast<uint64_t>(c.num_kda_layers()) * kda * sizeof(float);
}

uint64_t SequenceState::bytes_per_token(const TextConfig& c, CacheDtype cache) {
  return static_cast<uint64_t>(c.num_mla_layers()) * c.mla_cache_width() *
         (cache == CacheDtype::kBf16 ? sizeof(uint16_t) : sizeof(float));
}

}  // namespace k3
