#include "model/mla_layer.h"

#include <cmath>
#include <vector>

#include "base/numeric_types.h"
#include "kernels/activation.h"
#include "base/thread_pool.h"
#include "kernels/mla_attention.h"
#include "kernels/mla_prefill.h"
#include "kernels/linear.h"
#include "kernels/norm.h"

namespace k3 {
namespace {

struct Dims {
  int H, nope, rope, vdim, lora, qk, width, kvb;  // kvb = nope + vdim rows per head in kv_b
};

// Queries [len, H*qk] of one segment against its cache via the absorbed form: per head,
// q_lat = W_UK^T q_nope for all tokens at once; per token, all heads attend the latent cache
// together (mla_decode_attention reads it once); per head, W_UV maps the attended latents back.
template <class Elem>
void attend_absorbed(const MlaWeights& w, const Dims& m, const Elem* cache, const float* q, int64_t len, int64_t pos0,
                     float scale, float* o, Precision precision) {
  std::vector<float> qfull(len * m.H * m.width), olat(len * m.H * m.lora);
  global_pool().run(m.H, [&](int64_t h, int) {
    std::vector<float> qn(len * m.nope), ql(len * m.lora);
    for (int64_t i = 0; i < len; ++i)
      std::copy_n(q + i * m.H * m.qk + h * m.qk, m.nope, &qn[i * m.nope]);
    linear_transposed(w.kv_b.row_slice(h * m.kvb, m.nope), qn.data(), len, ql.data());
    for (int64_t i = 0; i < len; ++i) {
      float* dst = &qfull[(i * m.H + h) * m.width];
      std::copy_n(&ql[i * m.lora], m.lora, dst);
      std::copy_n(q + i * m.H * m.qk + h * m.qk + m.nope, m.rope, dst + m.lora);
    }
  });
  for (int64_t i = 0; i < len; ++i)  // causal: token i sees the cache up to and including itself
    mla_decode_attention(&qfull[i * m.H * m.width], cache, pos0 + i + 1, m.H, m.lora, m.rope, scale,
                         &olat[i * m.H * m.lora]);
  global_pool().run(m.H, [&](int64_t h, int) {
    std::vector<float> ol(len * m.lora), ov(len * m.vdim);
    for (int64_t i = 0; i < len; ++i) std::copy_n(&olat[(i * m.H + h) * m.lora], m.lora, &ol[i * m.lora]);
    linear(w.kv_b.row_slice(h * m.kvb + m.nope, m.vdim), ol.data(), len, ov.data(), precision);
    for (int64_t i = 0; i < len; ++i) std::copy_n(&ov[i * m.vdim], m.vdim, o + i * m.H * m.vdim + h * m.vdim);
  });
}

}  // namespace

void mla_layer_forward(const MlaWeights& w, const TextConfig& c, const BatchLayout& batch, int index, const float* x,
                       float* out, const MlaOptions& options, Precision precision) {
  const int64_t N = batch.rows;
  Dims m{c.num_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank,
         c.mla_qk_head_dim(), c.mla_cache_width(), c.qk_nope_head_dim + c.v_head_dim};

  // Every product of x in one batch (x prepared once, one pool dispatch, and over several ranks
  // one exchange): the query (or its low-rank half), the latent, the output gate.
  std::vector<float> q(N * m.H * m.qk), ckv(N * m.width), cq(N * w.q_a.rows), gate(N * w.g.rows);
  {
    std::vector<LinearJob> jobs = {{&w.kv_a, x, N, ckv.data(), precision}};
    if (!w.q_a.empty()) jobs.push_back({&w.q_a, x, N, cq.data(), precision});
    else jobs.push_back({&w.q_b, x, N, q.data(), precision});
    if (!w.g.empty()) jobs.push_back({&w.g, x, N, gate.data(), precision});
    linear_batch(jobs);
  }
  if (!w.q_a.empty()) {
    rms_norm(cq.data(), N, w.q_a.rows, w.q_a_norm.data(), c.mla_norm_eps, cq.data());
    linear(w.q_b, cq.data(), N, q.data(), precision);
  }
  for (int64_t t = 0; t < N; ++t)
    rms_norm(&ckv[t * m.width], 1, m.lora, w.kv_a_norm.data(), c.mla_norm_eps, &ckv[t * m.width]);

  const float scale = 1.0f / std::sqrt(static_cast<float>(m.qk));
  std::vector<float> o(N * m.H * m.vdim);
  const MlaPrefillShape shape{m.H, m.nope, m.rope, m.vdim, m.lora};
  const int64_t ldo = static_cast<int64_t>(m.H) * m.vdim;
  for (const BatchSegment& s : batch.segments) {
    const float* qs = q.data() + s.row0 * m.H * m.qk;
    float* os = o.data() + s.row0 * m.H * m.vdim;
    const bool decompressed = options.mode == MlaMode::kDecompressed ||
                              (options.mode == MlaMode::kAuto && mla_prefill_prefers_decompressed(shape, s.pos0, s.len));
    MlaLayerState& state = s.state->mla[index];
    const float* rows = &ckv[s.row0 * m.width];
    const int64_t count = s.len * m.width;
    if (s.state->cache_dtype() == CacheDtype::kF32) {
      state.latent.insert(state.latent.end(), rows, rows + count);
      if (decompressed) mla_prefill_attention(w.kv_b, shape, qs, state.latent.data(), s.pos0, s.len, scale, os, ldo);
      else attend_absorbed(w, m, state.latent.data(), qs, s.len, s.pos0, scale, os, precision);
    } else {
      // New rows are rounded once, when appended; every later read widens them exactly, so a
      // token attends its own row as rounded, whichever path and chunking runs it.
      AlignedVector<uint16_t>& cache = state.latent_bf16;
      const size_t old = cache.size();
      cache.resize(old + count);
      for (int64_t i = 0; i < count; ++i) cache[old + i] = f32_to_bf16(rows[i]);
      if (decompressed) mla_prefill_attention(w.kv_b, shape, qs, cache.data(), s.pos0, s.len, scale, os, ldo);
      else attend_absorbed(w, m, cache.data(), qs, s.len, s.pos0, scale, os, precision);
    }
  }
  if (!w.g.empty())
    for (size_t i = 0; i < o.size(); ++i) o[i] *= sigmoid(gate[i]);
  linear(w.o, o.data(), N, out, precision);
}

}  // namespace k3
