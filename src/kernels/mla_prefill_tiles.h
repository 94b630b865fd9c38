// The blocked causal MLA prefill (mla_prefill.h) written once over a set of operations Ops:
//   gemm(A, lda, B, ldb, C, ldc, m, k, n, acc)
//                                 C[m][n] (+)= A[m][k] B[k][n] (row strides lda, ldb, ldc), each
//                                 element summed over k in order, so a row's result never
//                                 depends on the other rows or on how rows are grouped
//   row_max(s, n)                 the largest of s[0..n)
//   exp_sum(s, n, mx)             s[j] = e^(s[j] - mx) for j < n, returning their sum
//   scale_row(o, n, c)            o[j] *= c
// Each reduction runs in a fixed order for a given n.  Included by mla_prefill.cpp (plain loops)
// and by mla_prefill_isa.cpp inside each instruction-set region (vector forms).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "base/numeric_types.h"
#include "base/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/matrix.h"
#include "kernels/mla_prefill.h"

namespace k3::mla_prefill_detail {

template <class Ops>
struct Blocked {
  // Members, not free functions: each level's copy must stay its own (kernels/simd/isa_begin.h).
  static float widen(float x) { return x; }
  static float widen(uint16_t x) { return bf16_to_f32(x); }

  // Per worker thread, kept between calls so that long segments do not fault in fresh pages.
  struct Scratch {
    std::vector<float> wkv, row, qh, out, m, l, lat, kv, kt, sc;
  };

  template <class Elem>
  static void run(const Matrix& kv_b, const MlaPrefillShape& s, const float* q, const Elem* cache, int64_t pos0,
                  int64_t len, float scale, float* o, int64_t ldo) {
    if (len <= 0) return;
    global_pool().run(s.heads, [&](int64_t h, int) { head(kv_b, s, q, cache, pos0, len, scale, o, ldo, h); });
  }

  // The block's latent rows as fp32 [b][lda]: the cache itself when it is fp32, else widened.
  static const float* latent(const float* cache, int64_t W, int64_t, int64_t, int64_t& lda, std::vector<float>&) {
    lda = W;
    return cache;
  }
  static const float* latent(const uint16_t* cache, int64_t W, int64_t b, int64_t lora, int64_t& lda,
                             std::vector<float>& buf) {
    lda = lora;
    for (int64_t j = 0; j < b; ++j)
      for (int64_t c = 0; c < lora; ++c) buf[j * lora + c] = bf16_to_f32(cache[j * W + c]);
    return buf.data();
  }

  template <class Elem>
  static void head(const Matrix& kv_b, const MlaPrefillShape& s, const float* q, const Elem* cache, int64_t pos0,
                   int64_t len, float scale, float* o, int64_t ldo, int64_t h) {
    thread_local Scratch t;
    const int64_t KB = kKeyBlock, TQ = kQueryTile, n = pos0 + len;
    const int64_t nope = s.nope, rope = s.rope, vdim = s.vdim, lora = s.lora, qk = s.qk(), W = s.width();
    const int64_t kvw = nope + vdim;  // a decompressed row: the key's nope part, then the value
    // This head's kv_b rows in fp32, transposed to [lora][nope + vdim].
    t.wkv.resize(lora * kvw);
    t.row.resize(lora);
    for (int64_t c = 0; c < kvw; ++c) {
      portable::dequant_row(kv_b, h * kvw + c, t.row.data());
      for (int64_t p = 0; p < lora; ++p) t.wkv[p * kvw + c] = t.row[p];
    }
    // The head's queries, scaled once.
    t.qh.resize(len * qk);
    for (int64_t i = 0; i < len; ++i) {
      const float* src = q + (i * s.heads + h) * qk;
      for (int64_t c = 0; c < qk; ++c) t.qh[i * qk + c] = src[c] * scale;
    }
    t.out.assign(len * vdim, 0.0f);
    t.m.assign(len, -std::numeric_limits<float>::infinity());
    t.l.assign(len, 0.0f);
    if (!std::is_same_v<Elem, float>) t.lat.resize(KB * lora);
    t.kv.resize(KB * kvw);
    t.kt.resize(qk * KB);
    t.sc.resize(TQ * KB);

    for (int64_t kb0 = 0; kb0 < n; kb0 += KB) {
      const int64_t b = std::min(KB, n - kb0);
      // Decompressed rows [KB][nope + vdim] (zero past the cache's end), then the keys
      // transposed to [qk][KB] with the cached rope part below.
      int64_t lda = 0;
      const float* lat = latent(cache + kb0 * W, W, b, lora, lda, t.lat);
      Ops::gemm(lat, lda, t.wkv.data(), kvw, t.kv.data(), kvw, b, lora, kvw, false);
      std::fill(t.kv.begin() + b * kvw, t.kv.end(), 0.0f);
      for (int64_t j0 = 0; j0 < KB; j0 += 16)
        for (int64_t c = 0; c < nope; ++c)
          for (int64_t j = j0; j < j0 + 16; ++j) t.kt[c * KB + j] = t.kv[j * kvw + c];
      for (int64_t r = 0; r < rope; ++r)
        for (int64_t j = 0; j < KB; ++j)
          t.kt[(nope + r) * KB + j] = j < b ? widen(cache[(kb0 + j) * W + lora + r]) : 0.0f;
      const float* v = t.kv.data() + nope;

      // Every query that sees a row of this block: positions kb0 and later.
      for (int64_t i = std::max<int64_t>(0, kb0 - pos0); i < len; i += TQ) {
        const int64_t tq = std::min(TQ, len - i);
        Ops::gemm(&t.qh[i * qk], qk, t.kt.data(), KB, t.sc.data(), KB, tq, qk, KB, false);
        for (int64_t r = 0; r < tq; ++r) {
          const int64_t lim = std::min(KB, pos0 + i + r - kb0 + 1);  // keys this query sees
          float* row = &t.sc[r * KB];
          const float m_old = t.m[i + r];
          const float mx = std::max(m_old, Ops::row_max(row, lim));
          const float corr = mx == m_old ? 1.0f : std::exp(m_old - mx);  // 0 on the first block
          const float sum = Ops::exp_sum(row, lim, mx);
          std::fill(row + lim, row + KB, 0.0f);
          t.l[i + r] = t.l[i + r] * corr + sum;
          t.m[i + r] = mx;
          if (corr != 1.0f) Ops::scale_row(&t.out[(i + r) * vdim], vdim, corr);
        }
        Ops::gemm(t.sc.data(), KB, v, kvw, &t.out[i * vdim], vdim, tq, KB, vdim, true);
      }
    }
    for (int64_t i = 0; i < len; ++i) {
      const float inv = 1.0f / t.l[i];
      float* dst = o + i * ldo + h * vdim;
      for (int64_t c = 0; c < vdim; ++c) dst[c] = t.out[i * vdim + c] * inv;
    }
  }
};

}  // namespace k3::mla_prefill_detail
