// The blocked MLA prefill (mla_prefill_tiles.h) with the level's small GEMM and a vector
// softmax, compiled once per instruction-set level (kernels/simd/isa.h).
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

#include "kernels/simd/isa_begin.h"
#include "kernels/mla_prefill_tiles.h"

namespace k3::K3_ISA_NS {
namespace {

struct Ops {
  static constexpr int L = Vec::kLanes;
  // Register tile: R rows by NV vectors of accumulators, NV loads of B per R * NV multiply-adds
  // (the B panel streams from L2 while A's rows stay in L1).  6 x 4 takes 24 + 4 + 1 of
  // AVX-512's 32 registers, 6 x 2 takes 12 + 2 + 1 of AVX2's 16.
  static constexpr int R = 6, NV = L == 16 ? 4 : 2;

  template <int RR, int VV>
  static void tile(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t k,
                   bool acc) {
    Vec::V c[RR][VV];
    for (int i = 0; i < RR; ++i)
      for (int v = 0; v < VV; ++v) c[i][v] = acc ? Vec::load(C + i * ldc + v * L) : Vec::zero();
    for (int64_t p = 0; p < k; ++p) {
      Vec::V b[VV];
      for (int v = 0; v < VV; ++v) b[v] = Vec::load(B + p * ldb + v * L);
      for (int i = 0; i < RR; ++i) {
        const Vec::V a = Vec::set1(A[i * lda + p]);
        for (int v = 0; v < VV; ++v) c[i][v] = Vec::fma(a, b[v], c[i][v]);
      }
    }
    for (int i = 0; i < RR; ++i)
      for (int v = 0; v < VV; ++v) Vec::store(C + i * ldc + v * L, c[i][v]);
  }

  template <int VV>
  static void rows(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t m,
                   int64_t k, bool acc) {
    int64_t i = 0;
    for (; i + R <= m; i += R) tile<R, VV>(A + i * lda, lda, B, ldb, C + i * ldc, ldc, k, acc);
    for (; i < m; ++i) tile<1, VV>(A + i * lda, lda, B, ldb, C + i * ldc, ldc, k, acc);
  }

  // Every element is an fma chain over p = 0..k-1 (the columns past the last full vector too),
  // whatever tile it falls in.
  static void gemm(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t m,
                   int64_t k, int64_t n, bool acc) {
    int64_t j = 0;
    for (; j + NV * L <= n; j += NV * L) rows<NV>(A, lda, B + j, ldb, C + j, ldc, m, k, acc);
    for (; j + L <= n; j += L) rows<1>(A, lda, B + j, ldb, C + j, ldc, m, k, acc);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t jj = j; jj < n; ++jj) {
        float sum = acc ? C[i * ldc + jj] : 0.0f;
        for (int64_t p = 0; p < k; ++p) sum = std::fma(A[i * lda + p], B[p * ldb + jj], sum);
        C[i * ldc + jj] = sum;
      }
  }
  // The last partial vector, the lanes past n set to `fill`.
  static Vec::V tail(const float* s, int64_t k, float fill) {
    float tmp[L];
    for (int j = 0; j < L; ++j) tmp[j] = j < k ? s[j] : fill;
    return Vec::load(tmp);
  }
  static float row_max(const float* s, int64_t n) {
    const float ninf = -std::numeric_limits<float>::infinity();
    Vec::V mx = Vec::set1(ninf);
    int64_t j = 0;
    for (; j + L <= n; j += L) mx = Vec::max(mx, Vec::load(s + j));
    if (j < n) mx = Vec::max(mx, tail(s + j, n - j, ninf));
    float lanes[L];
    Vec::store(lanes, mx);
    float r = ninf;
    for (int i = 0; i < L; ++i) r = std::max(r, lanes[i]);
    return r;
  }
  static float exp_sum(float* s, int64_t n, float mx) {
    const Vec::V m = Vec::set1(mx);
    Vec::V sum = Vec::zero();
    int64_t j = 0;
    for (; j + L <= n; j += L) {
      const Vec::V p = Vec::exp(Vec::sub(Vec::load(s + j), m));
      Vec::store(s + j, p);
      sum = Vec::add(sum, p);
    }
    if (j < n) {
      // Lanes past n hold -inf, whose e^x is 0.
      float tmp[L];
      const Vec::V p = Vec::exp(Vec::sub(tail(s + j, n - j, -std::numeric_limits<float>::infinity()), m));
      Vec::store(tmp, p);
      std::copy_n(tmp, n - j, s + j);
      sum = Vec::add(sum, p);
    }
    return Vec::reduce(sum);
  }
  static void scale_row(float* o, int64_t n, float c) {
    const Vec::V cv = Vec::set1(c);
    int64_t j = 0;
    for (; j + L <= n; j += L) Vec::store(o + j, Vec::mul(cv, Vec::load(o + j)));
    for (; j < n; ++j) o[j] *= c;
  }
};

using Blocked = mla_prefill_detail::Blocked<Ops>;

}  // namespace

void mla_prefill_attention(const Matrix& kv_b, const MlaPrefillShape& s, const float* q, const float* cache,
                           int64_t pos0, int64_t len, float scale, float* o, int64_t ldo) {
  Blocked::run(kv_b, s, q, cache, pos0, len, scale, o, ldo);
}

void mla_prefill_attention(const Matrix& kv_b, const MlaPrefillShape& s, const float* q, const uint16_t* cache_bf16,
                           int64_t pos0, int64_t len, float scale, float* o, int64_t ldo) {
  Blocked::run(kv_b, s, q, cache_bf16, pos0, len, scale, o, ldo);
}

}  // namespace k3::K3_ISA_NS

#include "kernels/simd/isa_end.h"
