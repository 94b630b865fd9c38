// The fast KDA kernels written once over a vector type (kernels/simd/avx2.h, avx512.h); included
// by kda_isa.cpp inside its instruction-set region (kernels/simd/isa_begin.h).
//
// Chunked prefill: the WY/UT form (Kimi Linear, arXiv:2510.26692) per chunk of C tokens (C a
// multiple of the 16-token sub-block), every product a register-blocked GEMM (outer-product
// form, 16 fp32 lanes along the contiguous dimension), all widths padded to the vector length
// with zeros:
//   G   = cumsum of g inside the chunk (row r: decay from the chunk start through token r)
//   L, Aqk  need exp(G_r - G_s), s <= r.  Per 16-row sub-block I, with p = the row before I,
//           e = its last row and the per-channel reference m = (G_p + G_e) / 2:
//           exp(G_r - G_s) = exp(G_r - m) * exp(m - G_s).  Both factors lie within e^(+-R/2),
//           R = the block's own decay G_p - G_e, for r, s in I; for s before I the right factor
//           is <= 1 (an underflow to 0 only where the product is below ~e^-45).  If R > 85
//           (impossible for K3's gate >= -5 per step: R <= 80; possible for Kimi-Linear's
//           unbounded softplus gate) that diagonal block is computed pairwise instead, with
//           exp(G_r - G_s) directly, and the rest of the row block with m = G_p (factors <= 1).  So no gate can overflow, and no term that matters can
//           flush to zero.
//   X   = (I + L)^-1 diag(beta) [k o exp(G) | v]        blocked forward substitution
//         (W | U: the left Kp columns, the right Vp columns)
//   Vn  = U - W S;  O = (q o exp(G)) S + Aqk Vn;  S = diag(exp G_last) S + (k o exp(G_last - G))^T Vn
// Every exponent on the state side is <= 0.  Runs with denormals flushed (MXCSR restored after).
//
// Decode step: per token, one read pass over S computing both k^T diag(a) S and q^T diag(a) S,
// then one read-write pass S = diag(a) S + k u^T; o = q^T diag(a) S + (q.k) u (the read after the
// write, expanded), so S is read from memory once and written once.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/aligned.h"
#include "kernels/kda.h"

namespace k3::kda_detail {

constexpr int kSubBlock = 16;
constexpr float kMaxDiagLogDecay = 85.0f;  // e^85 < FLT_MAX and e^-85 > FLT_MIN
// Token rows fetched ahead.  Rows of one head sit one [heads*dim] row apart, so they map to a
// few cache sets; a short distance keeps the prefetched lines from evicting each other.
constexpr int kPrefetchRows = 8;
// Vectors of one row the in-block forward substitution keeps in registers.
constexpr int kSubstVecs = 8;

template <class Tr>
struct Fast {
  using Vec = typename Tr::V;
  static constexpr int L = Tr::kLanes;
  static constexpr int MR = Tr::kKdaRows;
  static constexpr int NV = Tr::kKdaVecs;

  static int64_t pad(int64_t n) { return (n + L - 1) / L * L; }

  // C[i][j] = (acc ? rs[i] C[i][j] : 0) + sum_p A[i*lda + p] * B[p*ldb + j], i < RR, j < nv*L
  // (rs[i] = 1 when rs is null).
  template <int RR, int NN>
  static void tile(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t k,
                   bool acc, const float* rs) {
    Vec c[RR][NN];
    for (int i = 0; i < RR; ++i)
      for (int v = 0; v < NN; ++v) {
        c[i][v] = acc ? Tr::load(C + i * ldc + v * L) : Tr::zero();
        if (rs) c[i][v] = Tr::mul(Tr::set1(rs[i]), c[i][v]);
      }
    for (int64_t p = 0; p < k; ++p) {
      Vec b[NN];
      for (int v = 0; v < NN; ++v) b[v] = Tr::load(B + p * ldb + v * L);
      for (int i = 0; i < RR; ++i) {
        const Vec a = Tr::set1(A[i * lda + p]);
        for (int v = 0; v < NN; ++v) c[i][v] = Tr::fma(a, b[v], c[i][v]);
      }
    }
    for (int i = 0; i < RR; ++i)
      for (int v = 0; v < NN; ++v) Tr::store(C + i * ldc + v * L, c[i][v]);
  }

  template <int NN>
  static void panel(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t m,
                    int64_t k, bool acc, const float* rs) {
    int64_t i = 0;
    for (; i + MR <= m; i += MR) tile<MR, NN>(A + i * lda, lda, B, ldb, C + i * ldc, ldc, k, acc, rs ? rs + i : rs);
    const int64_t rest = m - i;
    A += i * lda;
    C += i * ldc;
    if (rs) rs += i;
    if constexpr (MR > 1) {
      switch (rest) {
        case 1: tile<1, NN>(A, lda, B, ldb, C, ldc, k, acc, rs); break;
        case 2: if constexpr (MR > 2) tile<2, NN>(A, lda, B, ldb, C, ldc, k, acc, rs); break;
        case 3: if constexpr (MR > 3) tile<3, NN>(A, lda, B, ldb, C, ldc, k, acc, rs); break;
        case 4: if constexpr (MR > 4) tile<4, NN>(A, lda, B, ldb, C, ldc, k, acc, rs); break;
        case 5: if constexpr (MR > 5) tile<5, NN>(A, lda, B, ldb, C, ldc, k, acc, rs); break;
        default: break;
      }
    }
  }

  // C (m x n, ld ldc) (+)= A (m x k, ld lda) * B (k x n, ld ldb); n a multiple of L.  With acc and
  // row_scale, C's row i is scaled by row_scale[i] before the products are added.
  static void gemm(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t m,
                   int64_t k, int64_t n, bool acc, const float* row_scale = nullptr) {
    static_assert(NV >= 1 && NV <= 4 && MR <= 6);
    if (k == 0) {
      if (!acc)
        for (int64_t i = 0; i < m; ++i) std::fill(C + i * ldc, C + i * ldc + n, 0.0f);
      else if (row_scale)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) C[i * ldc + j] *= row_scale[i];
      return;
    }
    for (int64_t j0 = 0; j0 < n; j0 += NV * L) {
      const int nv = static_cast<int>(std::min<int64_t>(NV, (n - j0) / L));
      switch (nv) {
        case 4: if constexpr (NV >= 4) panel<4>(A, lda, B + j0, ldb, C + j0, ldc, m, k, acc, row_scale); break;
        case 3: if constexpr (NV >= 3) panel<3>(A, lda, B + j0, ldb, C + j0, ldc, m, k, acc, row_scale); break;
        case 2: if constexpr (NV >= 2) panel<2>(A, lda, B + j0, ldb, C + j0, ldc, m, k, acc, row_scale); break;
        default: panel<1>(A, lda, B + j0, ldb, C + j0, ldc, m, k, acc, row_scale); break;
      }
    }
  }

  // out[i] = a[i] * exp(s - y[i])
  static void mul_exp_sdiff(const float* a, float s, const float* y, float* out, int64_t n) {
    const Vec sv = Tr::set1(s);
    for (int64_t i = 0; i < n; i += L)
      Tr::store(out + i, Tr::mul(Tr::load(a + i), Tr::exp(Tr::sub(sv, Tr::load(y + i)))));
  }

  struct Scratch {
    // 64-byte aligned: the GEMM tiles' vector loads must not split cache lines.
    AlignedVector<float> Q, Kc, G, KT, GT, LQ, RT, LA, NL, Aq, X, Qp, Vn, O, KtT, S, zero, ref, dec;
    AlignedVector<float> beta;
  };

  static void chunked(const KdaHeadIO& io, int64_t T, int K, int V, int chunk, float* state) {
    const int C = std::max(kSubBlock, (chunk + kSubBlock - 1) / kSubBlock * kSubBlock);
    const int64_t Kp = pad(K), Vp = pad(V), Wd = Kp + Vp;
    thread_local Scratch s;
    auto sz = [](AlignedVector<float>& v, int64_t n) {
      if (static_cast<int64_t>(v.size()) < n) v.resize(n);
    };
    for (auto* v : {&s.Q, &s.Kc, &s.G, &s.Qp}) sz(*v, C * Kp);
    for (auto* v : {&s.KT, &s.GT, &s.RT, &s.KtT}) sz(*v, Kp * C);
    sz(s.LQ, 2 * kSubBlock * Kp);
    sz(s.LA, 2 * kSubBlock * C);
    sz(s.NL, static_cast<int64_t>(C) * C);
    sz(s.Aq, static_cast<int64_t>(C) * C);
    sz(s.X, C * Wd);
    sz(s.Vn, C * Vp);
    sz(s.O, C * Vp);
    sz(s.S, Kp * Vp);
    sz(s.beta, C);
    s.zero.assign(Kp, 0.0f);
    sz(s.ref, Kp);
    sz(s.dec, Kp);
    // Flush denormals: steep decays make factors below FLT_MIN, whose contribution is far below
    // fp32 rounding of the result, but denormal arithmetic would cost microcode assists.
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u);  // FTZ | DAZ
    // Padded state copy (zeros outside K x V stay zero: padded k rows and v columns are zero).
    std::fill(s.S.begin(), s.S.begin() + Kp * Vp, 0.0f);
    for (int d = 0; d < K; ++d) std::copy(state + static_cast<int64_t>(d) * V, state + static_cast<int64_t>(d + 1) * V, &s.S[d * Vp]);

    for (int64_t t0 = 0; t0 < T; t0 += C) {
      const int c = static_cast<int>(std::min<int64_t>(C, T - t0));
      one_chunk(io, t0, c, C, K, V, Kp, Vp, s, T);
    }
    for (int d = 0; d < K; ++d) std::copy(&s.S[d * Vp], &s.S[d * Vp] + V, state + static_cast<int64_t>(d) * V);
    _mm_setcsr(csr);
  }

  // Rows of one head are far apart in memory (one row per token of a [T][heads*dim] tensor), so
  // the hardware prefetchers do not follow them: fetch token t's rows ahead, into L1.
  static void prefetch_rows(const KdaHeadIO& io, int64_t t, int K, int V) {
    for (const float* base : {io.q + t * io.stride_qk, io.k + t * io.stride_qk, io.g + t * io.stride_g})
      for (int d = 0; d < K; d += 16) __builtin_prefetch(base + d, 0, 3);
    const float* v = io.v + t * io.stride_v;
    for (int d = 0; d < V; d += 16) __builtin_prefetch(v + d, 0, 3);
  }

  // The next chunk's rows (q, k, g, v in; o out) into L2 while this one computes: the rows of a
  // head are one [heads*dim] row apart, a stride no hardware prefetcher follows.
  static void prefetch_chunk(const KdaHeadIO& io, int64_t t0, int64_t t1, int K, int V) {
    for (int64_t t = t0; t < t1; ++t) {
      for (const float* base : {io.q + t * io.stride_qk, io.k + t * io.stride_qk, io.g + t * io.stride_g})
        for (int d = 0; d < K; d += 16) __builtin_prefetch(base + d, 0, 2);
      const float* v = io.v + t * io.stride_v;
      const float* o = io.o + t * io.stride_o;
      for (int d = 0; d < V; d += 16) {
        __builtin_prefetch(v + d, 0, 2);
        __builtin_prefetch(o + d, 1, 2);
      }
    }
  }

  static void one_chunk(const KdaHeadIO& io, int64_t t0, int c, int C, int K, int V, int64_t Kp, int64_t Vp,
                        Scratch& s, int64_t T) {
    const int64_t Wd = Kp + Vp;
    if (t0 + C < T) prefetch_chunk(io, t0 + C, std::min(T, t0 + 2 * C), K, V);
    float* Q = s.Q.data();
    float* Kc = s.Kc.data();
    float* G = s.G.data();
    float* X = s.X.data();
    // Rows: q, k, cumulative g (zero padded); rhs = beta [k o exp(G) | v]; Qp = q o exp(G).
    for (int r = 0; r < c; ++r) {
      const int64_t t = t0 + r;
      if (t + kPrefetchRows < T) prefetch_rows(io, t + kPrefetchRows, K, V);
      const float* q = io.q + t * io.stride_qk;
      const float* k = io.k + t * io.stride_qk;
      const float* g = io.g + t * io.stride_g;
      const float* v = io.v + t * io.stride_v;
      const float beta = io.beta[t * io.stride_beta];
      s.beta[r] = beta;
      float* Qr = Q + r * Kp;
      float* Kr = Kc + r * Kp;
      float* Gr = G + r * Kp;
      const float* Gprev = r == 0 ? s.zero.data() : G + (r - 1) * Kp;
      const int kv = K / L * L, vv = V / L * L;
      for (int d = 0; d < kv; d += L) {
        Tr::store(Qr + d, Tr::load(q + d));
        Tr::store(Kr + d, Tr::load(k + d));
        Tr::store(Gr + d, Tr::add(Tr::load(Gprev + d), Tr::load(g + d)));
      }
      for (int d = kv; d < K; ++d) {
        Qr[d] = q[d];
        Kr[d] = k[d];
        Gr[d] = Gprev[d] + g[d];
      }
      for (int64_t d = K; d < Kp; ++d) Qr[d] = Kr[d] = Gr[d] = 0.0f;
      float* xr = X + r * Wd;
      float* qp = s.Qp.data() + r * Kp;
      const Vec bv = Tr::set1(beta);
      for (int64_t d = 0; d < Kp; d += L) {
        const Vec e = Tr::exp(Tr::load(Gr + d));
        Tr::store(xr + d, Tr::mul(bv, Tr::mul(Tr::load(Kr + d), e)));
        Tr::store(qp + d, Tr::mul(Tr::load(Qr + d), e));
      }
      float* xv = xr + Kp;
      for (int j = 0; j < vv; j += L) Tr::store(xv + j, Tr::mul(bv, Tr::load(v + j)));
      for (int j = vv; j < V; ++j) xv[j] = beta * v[j];
      for (int64_t j = V; j < Vp; ++j) xv[j] = 0.0f;
    }
    // K-major copies for the right factors (columns = tokens, ld C; zero past c), by L x L blocks.
    for (int r = c; r < C; ++r) {
      std::fill(Kc + r * Kp, Kc + (r + 1) * Kp, 0.0f);
      std::fill(G + r * Kp, G + (r + 1) * Kp, 0.0f);
    }
    for (int r = 0; r < C; r += L)
      for (int64_t d = 0; d < Kp; d += L) {
        Tr::transpose(Kc + r * Kp + d, Kp, s.KT.data() + d * C + r, C);
        Tr::transpose(G + r * Kp + d, Kp, s.GT.data() + d * C + r, C);
      }

    // L (negated, times beta, strictly lower) and Aqk (lower incl. diagonal), sub-block rows.
    const int nb = (c + kSubBlock - 1) / kSubBlock;
    for (int I = 0; I < nb; ++I) {
      const int r0 = I * kSubBlock, r1 = std::min(c, r0 + kSubBlock), b = r1 - r0;
      // Reference: per channel, halfway between the decay before the block and at its end.
      const float* before = r0 == 0 ? s.zero.data() : G + (r0 - 1) * Kp;
      const float* end = G + (r1 - 1) * Kp;
      float* ref = s.ref.data();
      float range = 0.0f;
      for (int64_t d = 0; d < Kp; ++d) {
        ref[d] = 0.5f * (before[d] + end[d]);
        range = std::max(range, before[d] - end[d]);
      }
      const bool pairwise = range > kMaxDiagLogDecay;
      if (pairwise) std::copy(before, before + Kp, ref);  // only s < r0 below: both factors <= 1
      for (int i = 0; i < b; ++i) {
        const float* Gr = G + (r0 + i) * Kp;
        float* lk = s.LQ.data() + i * Kp;
        float* lq = s.LQ.data() + (b + i) * Kp;
        for (int64_t d = 0; d < Kp; d += L) {
          const Vec e = Tr::exp(Tr::sub(Tr::load(Gr + d), Tr::load(ref + d)));
          Tr::store(lk + d, Tr::mul(Tr::load(Kc + (r0 + i) * Kp + d), e));
          Tr::store(lq + d, Tr::mul(Tr::load(Q + (r0 + i) * Kp + d), e));
        }
      }
      const int ncol = pairwise ? r0 : r1;
      const int64_t npad = pad(std::max(ncol, 1));
      for (int64_t d = 0; d < Kp; ++d) {
        float* rt = s.RT.data() + d * C;
        mul_exp_sdiff(s.KT.data() + d * C, ref[d], s.GT.data() + d * C, rt, npad);
        for (int64_t j = ncol; j < npad; ++j) rt[j] = 0.0f;
      }
      float* LA = s.LA.data();  // rows 0..b-1: k-side, b..2b-1: q-side; ld C
      if (ncol > 0) gemm(s.LQ.data(), Kp, s.RT.data(), C, LA, C, 2 * b, Kp, npad, false);
      if (pairwise) {
        for (int i = 0; i < b; ++i) {
          const int r = r0 + i;
          for (int j = r0; j <= r; ++j) {
            double kk = 0, qk = 0;
            for (int d = 0; d < K; ++d) {
              const float e = Kc[j * Kp + d] * std::exp(G[r * Kp + d] - G[j * Kp + d]);
              kk += Kc[r * Kp + d] * e;
              qk += Q[r * Kp + d] * e;
            }
            LA[i * C + j] = static_cast<float>(kk);
            LA[(b + i) * C + j] = static_cast<float>(qk);
          }
        }
      }
      for (int i = 0; i < b; ++i) {
        const int r = r0 + i;
        float* nl = s.NL.data() + static_cast<int64_t>(r) * C;
        float* aq = s.Aq.data() + static_cast<int64_t>(r) * C;
        const float nbeta = -s.beta[r];
        for (int j = 0; j < r1; ++j) {
          nl[j] = j < r ? nbeta * LA[i * C + j] : 0.0f;
          aq[j] = j <= r ? LA[(b + i) * C + j] : 0.0f;
        }
      }
    }
    // Forward substitution: X_I += NL[I, <r0] X_<r0, then inside the block row by row.
    for (int I = 0; I < nb; ++I) {
      const int r0 = I * kSubBlock, r1 = std::min(c, r0 + kSubBlock);
      if (r0 > 0) gemm(s.NL.data() + static_cast<int64_t>(r0) * C, C, X, Wd, X + r0 * Wd, Wd, r1 - r0, r0, Wd, true);
      for (int r = r0 + 1; r < r1; ++r) {
        float* xr = X + r * Wd;
        const float* nl = s.NL.data() + static_cast<int64_t>(r) * C;
        // kSubstVecs independent sums along the row (one chain per vector would wait on the FMA
        // latency at every step).
        for (int64_t j0 = 0; j0 < Wd; j0 += kSubstVecs * L) {
          const int nv = static_cast<int>(std::min<int64_t>(kSubstVecs, (Wd - j0) / L));
          Vec acc[kSubstVecs];
          for (int x = 0; x < kSubstVecs; ++x)
            acc[x] = x < nv ? Tr::load(xr + j0 + x * L) : Tr::zero();
          for (int m = r0; m < r; ++m) {
            const Vec a = Tr::set1(nl[m]);
            const float* xm = X + m * Wd + j0;
            for (int x = 0; x < kSubstVecs; ++x)
              if (x < nv) acc[x] = Tr::fma(a, Tr::load(xm + x * L), acc[x]);
          }
          for (int x = 0; x < kSubstVecs; ++x)
            if (x < nv) Tr::store(xr + j0 + x * L, acc[x]);
        }
      }
    }
    // Vn = U - W S.
    float* S = s.S.data();
    float* Vn = s.Vn.data();
    gemm(X, Wd, S, Vp, Vn, Vp, c, Kp, Vp, false);
    for (int r = 0; r < c; ++r)
      for (int64_t j = 0; j < Vp; j += L)
        Tr::store(Vn + r * Vp + j, Tr::sub(Tr::load(X + r * Wd + Kp + j), Tr::load(Vn + r * Vp + j)));
    // O = Qp S + Aqk Vn (Aqk lower triangular: sub-block rows use columns < r1 only).
    float* O = s.O.data();
    gemm(s.Qp.data(), Kp, S, Vp, O, Vp, c, Kp, Vp, false);
    for (int I = 0; I < nb; ++I) {
      const int r0 = I * kSubBlock, r1 = std::min(c, r0 + kSubBlock);
      gemm(s.Aq.data() + static_cast<int64_t>(r0) * C, C, Vn, Vp, O + r0 * Vp, Vp, r1 - r0, r1, Vp, true);
    }
    for (int r = 0; r < c; ++r) std::copy(O + r * Vp, O + r * Vp + V, io.o + (t0 + r) * io.stride_o);
    // S = diag(exp G_last) S + (k o exp(G_last - G))^T Vn.
    const float* Glast = G + (c - 1) * Kp;
    for (int64_t d = 0; d < Kp; d += L) Tr::store(s.dec.data() + d, Tr::exp(Tr::load(Glast + d)));
    for (int64_t d = 0; d < Kp; ++d)
      mul_exp_sdiff(s.KT.data() + d * C, Glast[d], s.GT.data() + d * C, s.KtT.data() + d * C, pad(c));
    gemm(s.KtT.data(), C, Vn, Vp, S, Vp, Kp, c, Vp, true, s.dec.data());
  }

  // Token-by-token with the fused step (needs V % L == 0; the caller checks).
  static void recurrent(const KdaHeadIO& io, int64_t T, int K, int V, float* __restrict state) {
    constexpr int kMaxVecs = 8;  // a panel of up to 8 vectors of v: 16 accumulators
    std::vector<float> ka(K), qa(K), a(K), u(V), p(V), o2(V);
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u);  // FTZ | DAZ, as in chunked()
    for (int64_t t = 0; t < T; ++t) {
      const float* q = io.q + t * io.stride_qk;
      const float* k = io.k + t * io.stride_qk;
      const float* v = io.v + t * io.stride_v;
      const float* g = io.g + t * io.stride_g;
      const float beta = io.beta[t * io.stride_beta];
      float* o = io.o + t * io.stride_o;
      if (t + 2 < T) prefetch_rows(io, t + 2, K, V);
      const int kv = K / L * L;
      for (int d = 0; d < kv; d += L) Tr::store(&a[d], Tr::exp(Tr::load(g + d)));
      for (int d = kv; d < K; ++d) a[d] = std::exp(g[d]);
      float qk = 0.0f;
      for (int d = 0; d < K; ++d) {
        ka[d] = k[d] * a[d];
        qa[d] = q[d] * a[d];
        qk += q[d] * k[d];
      }
      // Read pass: p = k^T diag(a) S, o = q^T diag(a) S.
      for (int j0 = 0; j0 < V; j0 += kMaxVecs * L) {
        const int nv = std::min(kMaxVecs, (V - j0) / L);
        Vec pa[kMaxVecs], oa[kMaxVecs];
        for (int x = 0; x < kMaxVecs; ++x) pa[x] = oa[x] = Tr::zero();
        for (int d = 0; d < K; ++d) {
          const float* row = state + static_cast<int64_t>(d) * V + j0;
          const Vec kd = Tr::set1(ka[d]), qd = Tr::set1(qa[d]);
          for (int x = 0; x < kMaxVecs; ++x)
            if (x < nv) {
              const Vec sv = Tr::load(row + x * L);
              pa[x] = Tr::fma(kd, sv, pa[x]);
              oa[x] = Tr::fma(qd, sv, oa[x]);
            }
        }
        for (int x = 0; x < nv; ++x) {
          Tr::store(&p[j0 + x * L], pa[x]);
          Tr::store(&o2[j0 + x * L], oa[x]);
        }
      }
      for (int j = 0; j < V; ++j) {
        u[j] = beta * (v[j] - p[j]);
        o[j] = o2[j] + qk * u[j];
      }
      // Write pass: S = diag(a) S + k u^T.
      for (int j0 = 0; j0 < V; j0 += kMaxVecs * L) {
        const int nv = std::min(kMaxVecs, (V - j0) / L);
        Vec uv[kMaxVecs];
        for (int x = 0; x < kMaxVecs; ++x) uv[x] = x < nv ? Tr::load(&u[j0 + x * L]) : Tr::zero();
        for (int d = 0; d < K; ++d) {
          float* row = state + static_cast<int64_t>(d) * V + j0;
          const Vec ad = Tr::set1(a[d]), kd = Tr::set1(k[d]);
          for (int x = 0; x < kMaxVecs; ++x)
            if (x < nv) Tr::store(row + x * L, Tr::fma(ad, Tr::load(row + x * L), Tr::mul(kd, uv[x])));
        }
      }
    }
    _mm_setcsr(csr);
  }
};

}  // namespace k3::kda_detail
