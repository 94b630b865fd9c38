// The loops of attention_kernels.h, included only by attention_kernels.cpp (reference build)
// and attention_kernels_avx2.cpp / _avx512.cpp (vector builds), which define the entry points
// with K3_VISION_DEFINE_ATTENTION_KERNELS inside their ISA namespace.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "vision/attention_kernels.h"

namespace k3 {
namespace attention_detail {
// Internal linkage on purpose: each including file compiles its own copy with its own
// instruction set.  Inline functions with external linkage would be merged by the linker into
// one arbitrary copy (ODR), silently running one ISA's code on every path.
namespace {

// exp(x) for x <= 0 (inputs below -87 give exp(-87) ~ 1.6e-38 instead of a denormal or 0).
float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float t = x * 1.44269504088896341f + 12582912.0f;  // 1.5 * 2^23: rounds x/ln2 to an integer
  const float k = t - 12582912.0f;
  const float r = (x - k * 0.693359375f) - k * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // t's low mantissa bits hold k (-126..0); 2^k is built from them (unsigned: no UB on NaN).
  const uint32_t e = std::bit_cast<uint32_t>(t) - 0x4B400000u + 127u;
  return p * std::bit_cast<float>(e << 23);
}

constexpr int kKeyBlock = 64;

// s[r][c] for QB query rows and the kKeyBlock keys starting at kt, each sum in order over d.
template <int QB>
void qk_block(const float* __restrict q, const float* __restrict kt, int64_t n, int hd, float* __restrict s) {
  float acc[QB][kKeyBlock] = {};
  for (int d = 0; d < hd; ++d) {
    const float* __restrict k = kt + d * n;
    for (int r = 0; r < QB; ++r) {
      const float a = q[r * hd + d];
      for (int c = 0; c < kKeyBlock; ++c) acc[r][c] += a * k[c];
    }
  }
  for (int r = 0; r < QB; ++r)
    for (int c = 0; c < kKeyBlock; ++c) s[r * n + c] = acc[r][c];
}

// Key blocks outermost, so one block of transposed keys (hd x 64) stays in L1 for every query.
void qk(const float* q, int64_t nq, const float* kt, int64_t n, int hd, float* s) {
  constexpr int QB = 4;
  int64_t j = 0;
  for (; j + kKeyBlock <= n; j += kKeyBlock) {
    int64_t i = 0;
    for (; i + QB <= nq; i += QB) qk_block<QB>(q + i * hd, kt + j, n, hd, s + i * n + j);
    for (; i < nq; ++i) qk_block<1>(q + i * hd, kt + j, n, hd, s + i * n + j);
  }
  for (; j < n; ++j)  // the last n % 64 keys
    for (int64_t i = 0; i < nq; ++i) {
      float a = 0.0f;
      for (int d = 0; d < hd; ++d) a += q[i * hd + d] * kt[d * n + j];
      s[i * n + j] = a;
    }
}

void softmax(float* s, int64_t rows, int64_t n, float scale) {
  constexpr int L = 16;
  for (int64_t r = 0; r < rows; ++r) {
    float* __restrict row = s + r * n;
    float m[L];
    for (int k = 0; k < L; ++k) m[k] = row[0];
    int64_t j = 0;
    for (; j + L <= n; j += L)
      for (int k = 0; k < L; ++k) m[k] = m[k] > row[j + k] ? m[k] : row[j + k];
    for (; j < n; ++j) m[0] = m[0] > row[j] ? m[0] : row[j];
    float mx = m[0];
    for (int k = 1; k < L; ++k) mx = mx > m[k] ? mx : m[k];
    const float shift = mx * scale;  // = max of scale * s (scale > 0)

    float acc[L] = {};
    for (j = 0; j + L <= n; j += L)
      for (int k = 0; k < L; ++k) {
        const float e = exp_nonpositive(row[j + k] * scale - shift);
        row[j + k] = e;
        acc[k] += e;
      }
    for (; j < n; ++j) {
      row[j] = exp_nonpositive(row[j] * scale - shift);
      acc[0] += row[j];
    }
    float sum = 0.0f;
    for (int k = 0; k < L; ++k) sum += acc[k];
    const float inv = 1.0f / sum;
    for (j = 0; j < n; ++j) row[j] *= inv;
  }
}

}  // namespace
}  // namespace attention_detail
}  // namespace k3

#define K3_VISION_DEFINE_ATTENTION_KERNELS                                                   \
  void qk_scores(const float* q, int64_t nq, const float* kt, int64_t n, int hd, float* s) { \
    attention_detail::qk(q, nq, kt, n, hd, s);                                               \
  }                                                                                          \
  void softmax_rows(float* s, int64_t rows, int64_t n, float scale) { attention_detail::softmax(s, rows, n, scale); }
