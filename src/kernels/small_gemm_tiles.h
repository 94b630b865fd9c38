// The outer-product small GEMM over a vector type (see small_gemm.h; built by linear_isa.cpp
// inside its instruction-set region):
// R rows of C x up to NV vectors of columns stay in registers while p runs over k.
#pragma once

#include <algorithm>
#include <cstdint>

#include "base/numeric_types.h"

namespace k3::tiles {

template <class Tr>
struct SmallGemm {
  using V = typename Tr::V;
  static constexpr int L = Tr::kLanes;
  static constexpr int R = Tr::kGemmRows;
  static constexpr int NV = Tr::kGemmVecs;

  template <int RR, typename BT>
  static void block(const float* A, const BT* B, float* C, int64_t k, int64_t n, int64_t j0, int nv, bool acc) {
    V c[RR][NV];
    for (int i = 0; i < RR; ++i)
      for (int v = 0; v < nv; ++v) c[i][v] = acc ? Tr::load(C + i * n + j0 + v * L) : Tr::zero();
    for (int64_t p = 0; p < k; ++p) {
      V b[NV];
      for (int v = 0; v < nv; ++v) b[v] = Tr::load_w(B + p * n + j0 + v * L);
      for (int i = 0; i < RR; ++i) {
        const V a = Tr::set1(A[i * k + p]);
        for (int v = 0; v < nv; ++v) c[i][v] = Tr::fma(a, b[v], c[i][v]);
      }
    }
    for (int i = 0; i < RR; ++i)
      for (int v = 0; v < nv; ++v) Tr::store(C + i * n + j0 + v * L, c[i][v]);
  }

  // B is fp32 or bf16 (widened exactly in registers).
  template <typename BT>
  static void run(const float* A, const BT* B, float* C, int64_t m, int64_t k, int64_t n, bool acc) {
    const int64_t nfull = n / L * L;
    for (int64_t j0 = 0; j0 < nfull; j0 += NV * L) {
      const int nv = static_cast<int>(std::min<int64_t>(NV, (nfull - j0) / L));
      int64_t i = 0;
      for (; i + R <= m; i += R) block<R, BT>(A + i * k, B, C + i * n, k, n, j0, nv, acc);
      for (; i < m; ++i) block<1, BT>(A + i * k, B, C + i * n, k, n, j0, nv, acc);
    }
    for (int64_t i = 0; i < m; ++i)  // columns past the last full vector
      for (int64_t j = nfull; j < n; ++j) {
        float s = acc ? C[i * n + j] : 0.0f;
        for (int64_t p = 0; p < k; ++p) s += A[i * k + p] * Tr::scalar(B[p * n + j]);
        C[i * n + j] = s;
      }
  }
};

}  // namespace k3::tiles
