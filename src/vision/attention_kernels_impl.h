// The flash-attention tile of attention_kernels.h, included only by attention_kernels.cpp
// (portable build) and attention_kernels_isa.cpp (one build per instruction-set level), which set
// K3_VISION_VEC (floats per vector register: 4, 8 or 16) and then define the entry points with
// K3_VISION_DEFINE_ATTENTION_KERNELS inside their level's namespace.
//
// The register blocking uses GCC vector extensions (vector_size = K3_VISION_VEC floats), so one
// source gives 4x4 16-wide accumulators under AVX-512, 4x3 8-wide ones under AVX2 and 4x3
// 4-wide (baseline SSE) ones in the reference build.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "kernels/simd/exp.h"
#include "vision/attention_kernels.h"

#ifndef K3_VISION_VEC
#error "define K3_VISION_VEC before including attention_kernels_impl.h"
#endif

namespace k3 {
namespace attention_detail {
// Internal linkage on purpose: each including file compiles its own copy with its own
// instruction set.  Inline functions with external linkage would be merged by the linker into
// one arbitrary copy (ODR), silently running one ISA's code on every path.
namespace {

constexpr int kVec = K3_VISION_VEC;
constexpr int kMaxVecs = kVec == 16 ? 4 : 3;  // vectors per accumulator row (4 rows x this <= 16 registers)
constexpr int kRows = 4;                      // query rows per micro-tile
constexpr int kKeyWidth = kMaxVecs * kVec;    // keys per q.k micro-tile: 64 (AVX-512), 24 (AVX2), 12
constexpr int kKeyBlock = kKeyWidth * (kVec == 16 ? 2 : 4);  // keys per online-softmax step: 128, 96, 48

typedef float vf __attribute__((vector_size(kVec * sizeof(float)), aligned(4), may_alias));

inline vf load(const float* p) { return *reinterpret_cast<const vf*>(p); }
inline void store(float* p, vf v) { *reinterpret_cast<vf*>(p) = v; }
inline vf splat(float x) { return x - vf{}; }  // x - 0 == x for every x (so it folds to a broadcast)

// exp(x) for x <= 0 (inputs below -87 give exp(-87) ~ 1.6e-38 instead of a denormal or 0):
// Cephes expf (kernels/simd/exp.h) in scalar steps, which the loops calling it vectorise; the
// exponent is built from the bits.
inline float exp_nonpositive(float x) {
  using namespace simd;
  x = x < -87.0f ? -87.0f : x;
  const float t = x * kExpLog2e + 12582912.0f;  // 1.5 * 2^23: rounds x/ln2 to an integer
  const float k = t - 12582912.0f;
  const float r = (x - k * kExpLn2Hi) - k * kExpLn2Lo;
  float p = kExpP0;
  p = p * r + kExpP1;
  p = p * r + kExpP2;
  p = p * r + kExpP3;
  p = p * r + kExpP4;
  p = p * r + kExpP5;
  p = p * (r * r) + r + 1.0f;
  // t's low mantissa bits hold k (-126..0); 2^k is built from them (unsigned: no UB on NaN).
  const uint32_t e = std::bit_cast<uint32_t>(t) - 0x4B400000u + 127u;
  return p * std::bit_cast<float>(e << 23);
}

// s[r][c] = sum_d q[r][d] * kt[d][c] for kRows rows and kKeyWidth keys (kt row stride ld),
// each sum in order over d.
inline void qk_micro(const float* __restrict q, int hd, const float* __restrict kt, int64_t ld, float* __restrict s,
                     int64_t ls) {
  vf acc[kRows][kMaxVecs] = {};
  for (int d = 0; d < hd; ++d) {
    vf k[kMaxVecs];
    for (int v = 0; v < kMaxVecs; ++v) k[v] = load(kt + d * ld + v * kVec);
    for (int r = 0; r < kRows; ++r) {
      const vf a = splat(q[r * hd + d]);
      for (int v = 0; v < kMaxVecs; ++v) acc[r][v] += a * k[v];
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kMaxVecs; ++v) store(s + r * ls + v * kVec, acc[r][v]);
}

// o[r][c] += sum_j p[r][j] * v[j][c] for kRows rows, V vectors of columns, kKeyBlock keys.
template <int V>
inline void pv_micro(const float* __restrict p, const float* __restrict v, int64_t ldv, float* __restrict o,
                     int64_t ldo) {
  vf acc[kRows][V];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < V; ++c) acc[r][c] = load(o + r * ldo + c * kVec);
  for (int j = 0; j < kKeyBlock; ++j) {
    vf x[V];
    for (int c = 0; c < V; ++c) x[c] = load(v + j * ldv + c * kVec);
    for (int r = 0; r < kRows; ++r) {
      const vf a = splat(p[r * kKeyBlock + j]);
      for (int c = 0; c < V; ++c) acc[r][c] += a * x[c];
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < V; ++c) store(o + r * ldo + c * kVec, acc[r][c]);
}

inline void pv_rows(const float* p, const float* v, int64_t ldv, float* o, int64_t ldo, int vecs) {
  for (int c = 0; c < vecs; c += kMaxVecs) {
    const int n = std::min(kMaxVecs, vecs - c);
    const float* vc = v + c * kVec;
    float* oc = o + c * kVec;
    switch (n) {
      case 4: pv_micro<4 <= kMaxVecs ? 4 : 1>(p, vc, ldv, oc, ldo); break;
      case 3: pv_micro<3>(p, vc, ldv, oc, ldo); break;
      case 2: pv_micro<2>(p, vc, ldv, oc, ldo); break;
      default: pv_micro<1>(p, vc, ldv, oc, ldo); break;
    }
  }
}

struct TileBuffers {
  float* s;    // [rows][kKeyBlock]
  float* o;    // [rows][hd_pad]
  float* m;    // [rows] running max of the raw scores
  float* l;    // [rows][kVec] running sums, per lane
};

// One query tile against all keys of one image and head (see attention_kernels.h).
void tile(const float* q, int64_t nq, const float* kt, const float* v, int64_t n, int hd, int hd_pad, float scale,
          float* out, int64_t ldo, const TileBuffers& b) {
  const int64_t rows = (nq + kRows - 1) / kRows * kRows;
  const int vecs = hd_pad / kVec;
  std::fill(b.o, b.o + rows * hd_pad, 0.0f);
  for (int64_t j0 = 0; j0 < n; j0 += kKeyBlock) {
    const int64_t kb = std::min<int64_t>(kKeyBlock, n - j0);
    // Scores of the block.
    for (int64_t i = 0; i < rows; i += kRows)
      for (int c = 0; c < kKeyBlock; c += kKeyWidth)
        qk_micro(q + i * hd, hd, kt + j0 * hd + c, kKeyBlock, b.s + i * kKeyBlock + c, kKeyBlock);
    // Online softmax: rescale what was accumulated when the running maximum grows.  The sum
    // is kept per lane (l holds kVec partial sums per row) and reduced once at the end.
    for (int64_t r = 0; r < rows; ++r) {
      float* __restrict s = b.s + r * kKeyBlock;
      vf mv = splat(s[0]);  // kVec partial maxima
      int64_t c = 0;
      for (; c + kVec <= kb; c += kVec) {
        const vf x = load(s + c);
        mv = mv > x ? mv : x;
      }
      float part[kVec];
      std::memcpy(part, &mv, sizeof part);
      for (; c < kb; ++c) part[0] = part[0] > s[c] ? part[0] : s[c];
      for (int w = kVec / 2; w >= 1; w /= 2)  // a tree: short dependency chains
        for (int k = 0; k < w; ++k) part[k] = part[k] > part[k + w] ? part[k] : part[k + w];
      const float mx = part[0];
      float* __restrict l = b.l + r * kVec;
      float alpha = 1.0f;
      if (j0 == 0) {
        b.m[r] = mx;
        for (int k = 0; k < kVec; ++k) l[k] = 0.0f;
      } else if (mx > b.m[r]) {
        alpha = exp_nonpositive((b.m[r] - mx) * scale);
        b.m[r] = mx;
        for (int k = 0; k < kVec; ++k) l[k] *= alpha;
      }
      const float shift = b.m[r] * scale;
      for (c = 0; c + kVec <= kb; c += kVec)
        for (int k = 0; k < kVec; ++k) {
          const float e = exp_nonpositive(s[c + k] * scale - shift);
          s[c + k] = e;
          l[k] += e;
        }
      for (; c < kb; ++c) {
        s[c] = exp_nonpositive(s[c] * scale - shift);
        l[0] += s[c];
      }
      for (; c < kKeyBlock; ++c) s[c] = 0.0f;  // keys past the image's end
      if (alpha != 1.0f) {
        float* __restrict o = b.o + r * hd_pad;
        for (int d = 0; d < hd_pad; ++d) o[d] *= alpha;
      }
    }
    for (int64_t i = 0; i < rows; i += kRows)
      pv_rows(b.s + i * kKeyBlock, v + j0 * hd_pad, hd_pad, b.o + i * hd_pad, hd_pad, vecs);
  }
  for (int64_t r = 0; r < nq; ++r) {
    const float* l = b.l + r * kVec;
    float sum = 0.0f;
    for (int k = 0; k < kVec; ++k) sum += l[k];
    const float inv = 1.0f / sum;
    for (int d = 0; d < hd; ++d) out[r * ldo + d] = b.o[r * hd_pad + d] * inv;
  }
}

}  // namespace
}  // namespace attention_detail
}  // namespace k3

#define K3_VISION_DEFINE_ATTENTION_KERNELS                                                                       \
  AttentionBlocking attention_blocking() {                                                                      \
    return {attention_detail::kRows, attention_detail::kKeyBlock, attention_detail::kVec};                      \
  }                                                                                                             \
  void attention_tile(const float* q, int64_t nq, const float* kt, const float* v, int64_t n, int hd, int hd_pad, \
                      float scale, float* out, int64_t ldo, float* scratch) {                                   \
    const int64_t rows = (nq + attention_detail::kRows - 1) / attention_detail::kRows * attention_detail::kRows; \
    const attention_detail::TileBuffers b{scratch, scratch + rows * attention_detail::kKeyBlock,                 \
                                          scratch + rows * (attention_detail::kKeyBlock + hd_pad),               \
                                          scratch + rows * (attention_detail::kKeyBlock + hd_pad + 1)};          \
    attention_detail::tile(q, nq, kt, v, n, hd, hd_pad, scale, out, ldo, b);                                    \
  }
