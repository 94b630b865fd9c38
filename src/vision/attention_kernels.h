// The two attention-specific loops of the vision tower, written element-wise with fixed-size
// blocks so the compiler vectorises them; attention_kernels.cpp compiles them as the reference
// and attention_kernels_avx2.cpp / _avx512.cpp for wider vectors (run-time dispatch on
// active_isa(), like src/kernels).  The blocking is relative to each call's own queries and
// keys (one image), so an image's result does not depend on what is packed with it.
//   qk_scores:    s[i][j] = sum_d q[i][d] * kt[d][j]   (keys transposed: the reduction is short)
//   softmax_rows: s = exp(scale*s - max) / sum in place, with 16 fixed partial sums/maxima and a
//                 polynomial exp (Cephes expf: range reduction by ln 2, degree-7 polynomial,
//                 exponent built from the bits; within 2 ulp of expf on [-87, 0]).
#pragma once

#include <cstdint>

namespace k3 {

// q: [nq, hd]; kt: [hd, n]; s: [nq, n].
void qk_scores(const float* q, int64_t nq, const float* kt, int64_t n, int hd, float* s);
void softmax_rows(float* s, int64_t rows, int64_t n, float scale);

namespace ref {
void qk_scores(const float* q, int64_t nq, const float* kt, int64_t n, int hd, float* s);
void softmax_rows(float* s, int64_t rows, int64_t n, float scale);
}  // namespace ref
namespace avx2 {
void qk_scores(const float* q, int64_t nq, const float* kt, int64_t n, int hd, float* s);
void softmax_rows(float* s, int64_t rows, int64_t n, float scale);
}  // namespace avx2
namespace avx512 {
void qk_scores(const float* q, int64_t nq, const float* kt, int64_t n, int hd, float* s);
void softmax_rows(float* s, int64_t rows, int64_t n, float scale);
}  // namespace avx512

}  // namespace k3
