// The fast absorbed-MLA decode kernel written once over a vector type (kernels/simd/avx2.h,
// avx512.h); included by mla_attention_isa.cpp inside its instruction-set region.
//
// Per fixed task of mla_detail::task_rows(n) cache rows (thread-count independent), per block of
// kBlock rows, with heads padded to Hp (a multiple of the vector length, padded q rows zero):
//   scores  sT[t][h] = sum_c cache[t][c] * qT[c][h]      SR rows x SV head vectors of accumulators,
//           one cache element broadcast per row and step, q (pre-scaled, transposed into
//           contiguous [width][SV*L] panels) loaded as vectors: no transposes of the cache.
//   softmax online per head, vectorised across heads (sT is already head-minor).
//   values  o[h][c] += sum_t p[t][h] cache[t][c]        VR heads x VV column vectors of
//           accumulators, p broadcast, cache rows loaded along the latent.
// Each task's (max, sum, unnormalised o) goes to mla_detail::merge_tasks, merged in task order.
#pragma once

#include <algorithm>
#include <bit>
#include <type_traits>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/mla_attention.h"

namespace k3::mla_detail {

// SR x SV: score tile (rows x head vectors); VR x VV: value tile (heads x latent vectors).
template <class Tr, int SR, int SV, int VR, int VV>
struct Fast {
  using Vec = typename Tr::V;
  static constexpr int L = Tr::kLanes;
  // Cache rows per softmax block (a multiple of SR; task_rows() is a multiple of it).  Each value
  // tile runs over a block's rows once, its accumulators loaded and stored around that run, so
  // short blocks spend much of the tile's time outside the FMA loop; 256 rows comes close to the
  // speed of longer blocks and still divides every task (task_rows() is whole 256-row blocks).
  static constexpr int64_t kBlock = 256;
  static_assert(kBlock % SR == 0 && L % VR == 0);

  // sT[i][j] = sum_c rows[i*W + c] * panel[c*NN*L + j] for i < SR, j < NN*L.
  template <int NN>
  static void score_tile(const float* rows, int64_t W, const float* panel, int width, float* sT, int64_t ld) {
    Vec acc[SR][NN];
    for (int i = 0; i < SR; ++i)
      for (int v = 0; v < NN; ++v) acc[i][v] = Tr::zero();
    for (int c = 0; c < width; ++c) {
      Vec qv[NN];
      for (int v = 0; v < NN; ++v) qv[v] = Tr::load(panel + static_cast<int64_t>(c) * NN * L + v * L);
      for (int i = 0; i < SR; ++i) {
        const Vec a = Tr::set1(rows[i * W + c]);
        for (int v = 0; v < NN; ++v) acc[i][v] = Tr::fma(a, qv[v], acc[i][v]);
      }
    }
    for (int i = 0; i < SR; ++i)
      for (int v = 0; v < NN; ++v) Tr::store(sT + i * ld + v * L, acc[i][v]);
  }

  // o[i][j] += sum_t p[t*ld_p + i] * rows[t*W + j] for i < VR, j < NN*L (the last vector only
  // `tail` wide when Tail: the cache row may end there).
  template <int NN, bool Tail>
  static void value_tile(const float* p, int64_t ld_p, const float* rows, int64_t W, int b, float* o, int64_t ldo,
                         int tail) {
    Vec acc[VR][NN];
    for (int i = 0; i < VR; ++i)
      for (int v = 0; v < NN; ++v) acc[i][v] = Tr::load(o + i * ldo + v * L);
    for (int t = 0; t < b; ++t) {
      const float* row = rows + t * W;
      Vec cv[NN];
      for (int v = 0; v + 1 < NN; ++v) cv[v] = Tr::load(row + v * L);
      if constexpr (Tail) cv[NN - 1] = Tr::load_first(row + (NN - 1) * L, tail);
      else cv[NN - 1] = Tr::load(row + (NN - 1) * L);
      for (int i = 0; i < VR; ++i) {
        const Vec a = Tr::set1(p[t * ld_p + i]);
        for (int v = 0; v < NN; ++v) acc[i][v] = Tr::fma(a, cv[v], acc[i][v]);
      }
    }
    for (int i = 0; i < VR; ++i)
      for (int v = 0; v < NN; ++v) Tr::store(o + i * ldo + v * L, acc[i][v]);
  }

  template <bool Tail>
  static void value_tiles(int nv, const float* p, int64_t ld_p, const float* rows, int64_t W, int b, float* o,
                          int64_t ldo, int tail) {
    switch (nv) {
      case 1: value_tile<1, Tail>(p, ld_p, rows, W, b, o, ldo, tail); break;
      case 2: if constexpr (VV >= 2) value_tile<2, Tail>(p, ld_p, rows, W, b, o, ldo, tail); break;
      case 3: if constexpr (VV >= 3) value_tile<3, Tail>(p, ld_p, rows, W, b, o, ldo, tail); break;
      case 4: if constexpr (VV >= 4) value_tile<4, Tail>(p, ld_p, rows, W, b, o, ldo, tail); break;
      case 5: if constexpr (VV >= 5) value_tile<5, Tail>(p, ld_p, rows, W, b, o, ldo, tail); break;
      case 6: if constexpr (VV >= 6) value_tile<6, Tail>(p, ld_p, rows, W, b, o, ldo, tail); break;
      default: break;
    }
  }

  struct Query {
    std::vector<float> panels;  // per group of SV head vectors: [width][group width], scaled q
    int64_t Hp = 0;
    int groups = 0;
  };

  static Query prepare(const float* q, int heads, int width, float scale) {
    Query Q;
    Q.Hp = (heads + L - 1) / L * L;
    const int nvec = static_cast<int>(Q.Hp / L);
    Q.groups = (nvec + SV - 1) / SV;
    Q.panels.assign(static_cast<size_t>(width) * Q.Hp, 0.0f);
    for (int g = 0; g < Q.groups; ++g) {
      const int h0 = g * SV * L, gw = std::min(SV, nvec - g * SV) * L;
      float* panel = Q.panels.data() + static_cast<int64_t>(width) * h0;
      for (int j = 0; j < gw && h0 + j < heads; ++j) {
        const float* qh = q + static_cast<int64_t>(h0 + j) * width;
        for (int c = 0; c < width; ++c) panel[static_cast<int64_t>(c) * gw + j] = qh[c] * scale;
      }
    }
    return Q;
  }

  struct Scratch {
    std::vector<float> sT, corr, pad, wide;
  };

  // dst[i] = the fp32 value of bf16 bits src[i] (exact: the bits shifted into the high half).
  static void widen_bf16(const uint16_t* src, int64_t count, float* dst) {
    for (int64_t i = 0; i < count; ++i) dst[i] = std::bit_cast<float>(static_cast<uint32_t>(src[i]) << 16);
  }

  // One task: rows [j0, j1) into m, l [Hp] and o [Hp][ldo] (ldo >= lora rounded up to L).
  // Elem: float, or uint16_t for a bf16 cache, each block of which is widened into s.wide first.
  template <class Elem>
  static void attend_range(const Query& Q, const Elem* cache, int64_t j0, int64_t j1, int width, int lora,
                           float* m, float* l, float* o, int64_t ldo) {
    const int64_t Hp = Q.Hp, W = width;
    thread_local Scratch s;
    s.sT.resize(kBlock * Hp);
    s.corr.resize(Hp);
    s.pad.resize(SR * W);
    if constexpr (!std::is_same_v<Elem, float>) s.wide.resize(kBlock * W);
    std::fill(m, m + Hp, -std::numeric_limits<float>::infinity());
    std::fill(l, l + Hp, 0.0f);
    std::fill(o, o + Hp * ldo, 0.0f);
    const int nvec = static_cast<int>(Hp / L);
    const int lvec = (lora + L - 1) / L, ltail = lora % L;
    for (int64_t b0 = j0; b0 < j1; b0 += kBlock) {
      const int b = static_cast<int>(std::min(kBlock, j1 - b0));
      const float* blk;
      if constexpr (std::is_same_v<Elem, float>) {
        blk = cache + b0 * W;
      } else {
        widen_bf16(cache + b0 * W, b * W, s.wide.data());
        blk = s.wide.data();
      }
      // Scores, SR rows at a time (a short last tile runs on zero-padded copies of its rows).
      for (int t = 0; t < b; t += SR) {
        const float* rows = blk + t * W;
        if (t + SR > b) {
          std::fill(s.pad.begin(), s.pad.end(), 0.0f);
          std::memcpy(s.pad.data(), rows, sizeof(float) * (b - t) * W);
          rows = s.pad.data();
        }
        for (int g = 0; g < Q.groups; ++g) {
          const int64_t h0 = static_cast<int64_t>(g) * SV * L;
          const float* panel = Q.panels.data() + W * h0;
          float* st = s.sT.data() + t * Hp + h0;
          switch (std::min(SV, nvec - g * SV)) {
            case 1: score_tile<1>(rows, W, panel, width, st, Hp); break;
            case 2: if constexpr (SV >= 2) score_tile<2>(rows, W, panel, width, st, Hp); break;
            case 3: if constexpr (SV >= 3) score_tile<3>(rows, W, panel, width, st, Hp); break;
            case 4: if constexpr (SV >= 4) score_tile<4>(rows, W, panel, width, st, Hp); break;
            case 5: if constexpr (SV >= 5) score_tile<5>(rows, W, panel, width, st, Hp); break;
            case 6: if constexpr (SV >= 6) score_tile<6>(rows, W, panel, width, st, Hp); break;
            default: break;
          }
        }
      }
      // Online softmax, L heads per vector.
      bool rescale = false;
      for (int64_t h = 0; h < Hp; h += L) {
        const Vec m_old = Tr::load(m + h);
        Vec mx = m_old;
        for (int t = 0; t < b; ++t) mx = Tr::max(mx, Tr::load(&s.sT[t * Hp + h]));
        Vec sum = Tr::zero();
        for (int t = 0; t < b; ++t) {
          const Vec p = Tr::exp(Tr::sub(Tr::load(&s.sT[t * Hp + h]), mx));
          Tr::store(&s.sT[t * Hp + h], p);
          sum = Tr::add(sum, p);
        }
        const Vec corr = Tr::exp(Tr::sub(m_old, mx));  // 0 on the first block (m = -inf)
        Tr::store(l + h, Tr::fma(Tr::load(l + h), corr, sum));
        Tr::store(m + h, mx);
        Tr::store(&s.corr[h], corr);
      }
      if (b0 > j0)
        for (int64_t h = 0; h < Hp; ++h) rescale |= s.corr[h] != 1.0f;
      if (rescale) {
        for (int64_t h = 0; h < Hp; ++h) {
          if (s.corr[h] == 1.0f) continue;
          const Vec cv = Tr::set1(s.corr[h]);
          float* oh = o + h * ldo;
          for (int64_t c = 0; c < ldo; c += L) Tr::store(oh + c, Tr::mul(cv, Tr::load(oh + c)));
        }
      }
      // Values: VV latent vectors x VR heads per tile; the slab of cache columns stays in L1.
      for (int v0 = 0; v0 < lvec; v0 += VV) {
        const int nv = std::min(VV, lvec - v0);
        const int tail = v0 + nv == lvec ? ltail : 0;
        for (int64_t h = 0; h < Hp; h += VR) {
          const float* p = s.sT.data() + h;
          float* oh = o + h * ldo + v0 * L;
          const float* rows = blk + v0 * L;
          if (tail > 0) value_tiles<true>(nv, p, Hp, rows, W, b, oh, ldo, tail);
          else value_tiles<false>(nv, p, Hp, rows, W, b, oh, ldo, tail);
        }
      }
    }
  }

  template <class Elem>
  static void decode(const float* q, const Elem* cache, int64_t n, int heads, int lora, int rope, float scale,
                     float* o_lat) {
    const int width = lora + rope;
    const Query Q = prepare(q, heads, width, scale);
    const int64_t Hp = Q.Hp, ldo = (lora + L - 1) / L * L;
    const int64_t rows = task_rows(n), tasks = std::max<int64_t>(1, (n + rows - 1) / rows);
    // Per calling thread, kept between calls: long contexts need megabytes of partial outputs,
    // and fresh pages would cost a fault each.
    thread_local std::vector<float> ml, os;
    if (ml.size() < static_cast<size_t>(tasks * 2 * Hp)) ml.resize(tasks * 2 * Hp);
    if (os.size() < static_cast<size_t>(tasks * Hp * ldo)) os.resize(tasks * Hp * ldo);
    // The pool's workers must write into this thread's buffers, not their own thread_locals.
    float* const mlp = ml.data();
    float* const osp = os.data();
    auto one = [&](int64_t t, int) {
      attend_range(Q, cache, t * rows, std::min(n, (t + 1) * rows), width, lora, mlp + t * 2 * Hp,
                   mlp + t * 2 * Hp + Hp, osp + t * Hp * ldo, ldo);
    };
    if (tasks == 1) one(0, 0);
    else global_pool().run(tasks, one);
    merge_tasks(mlp, mlp + Hp, 2 * Hp, osp, Hp * ldo, ldo, tasks, heads, lora, o_lat);
  }
};

}  // namespace k3::mla_detail
