// The blocked causal MLA prefill (mla_prefill.h) written once over a set of operations Ops:
//   gemm(A, B, C, m, k, n, acc)   C[m][n] (+)= A[m][k] B[k][n], each element summed over k in
//                                 order (small_gemm.h), so a row's result never depends on the others
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
    std::vector<float> wk, wvt, row, qh, out, m, l, lat, lt, kt, v, sc;
  };

  template <class Elem>
  static void run(const Matrix& kv_b, const MlaPrefillShape& s, const float* q, const Elem* cache, int64_t pos0,
                  int64_t len, float scale, float* o, int64_t ldo) {
    if (len <= 0) return;
    global_pool().run(s.heads, [&](int64_t h, int) { head(kv_b, s, q, cache, pos0, len, scale, o, ldo, h); });
  }

  template <class Elem>
  static void head(const Matrix& kv_b, const MlaPrefillShape& s, const float* q, const Elem* cache, int64_t pos0,
                   int64_t len, float scale, float* o, int64_t ldo, int64_t h) {
    thread_local Scratch t;
    const int64_t KB = kKeyBlock, TQ = kQueryTile, n = pos0 + len;
    const int64_t nope = s.nope, rope = s.rope, vdim = s.vdim, lora = s.lora, qk = s.qk(), W = s.width();
    const int64_t r0 = h * (nope + vdim);
    // This head's weights in fp32: W_UK as [nope][lora], W_UV transposed to [lora][vdim].
    t.wk.resize(nope * lora);
    for (int64_t r = 0; r < nope; ++r) portable::dequant_row(kv_b, r0 + r, &t.wk[r * lora]);
    t.wvt.resize(lora * vdim);
    t.row.resize(lora);
    for (int64_t c = 0; c < vdim; ++c) {
      portable::dequant_row(kv_b, r0 + nope + c, t.row.data());
      for (int64_t p = 0; p < lora; ++p) t.wvt[p * vdim + c] = t.row[p];
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
    t.lat.resize(KB * lora);
    t.lt.resize(lora * KB);
    t.kt.resize(qk * KB);
    t.v.resize(KB * vdim);
    t.sc.resize(TQ * KB);

    for (int64_t kb0 = 0; kb0 < n; kb0 += KB) {
      const int64_t b = std::min(KB, n - kb0);
      // The block's latent rows (zero past the cache's end), also transposed for the keys.
      for (int64_t j = 0; j < KB; ++j) {
        float* dst = &t.lat[j * lora];
        if (j < b) {
          const Elem* src = cache + (kb0 + j) * W;
          for (int64_t c = 0; c < lora; ++c) dst[c] = widen(src[c]);
        } else {
          std::fill(dst, dst + lora, 0.0f);
        }
      }
      for (int64_t j0 = 0; j0 < KB; j0 += 16)
        for (int64_t c = 0; c < lora; ++c)
          for (int64_t j = j0; j < j0 + 16; ++j) t.lt[c * KB + j] = t.lat[j * lora + c];
      // Keys transposed, [qk][KB]: W_UK lat, then the cached rope part.  Values [KB][vdim].
      Ops::gemm(t.wk.data(), t.lt.data(), t.kt.data(), nope, lora, KB, false);
      for (int64_t r = 0; r < rope; ++r)
        for (int64_t j = 0; j < KB; ++j)
          t.kt[(nope + r) * KB + j] = j < b ? widen(cache[(kb0 + j) * W + lora + r]) : 0.0f;
      Ops::gemm(t.lat.data(), t.wvt.data(), t.v.data(), KB, lora, vdim, false);

      // Every query that sees a row of this block: positions kb0 and later.
      for (int64_t i = std::max<int64_t>(0, kb0 - pos0); i < len; i += TQ) {
        const int64_t tq = std::min(TQ, len - i);
        Ops::gemm(&t.qh[i * qk], t.kt.data(), t.sc.data(), tq, qk, KB, false);
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
        Ops::gemm(t.sc.data(), t.v.data(), &t.out[i * vdim], tq, KB, vdim, true);
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
