#include "kernels/activation.h"

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "kernels/simd/dispatch.h"

namespace k3 {

namespace portable {
void sigmoid(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = k3::sigmoid(x[i]);
}

void silu(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = k3::silu(x[i]);
}

void mul_sigmoid(const float* x, const float* gate, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * k3::sigmoid(gate[i]);
}

void situ_glu(const float* g, const float* u, int64_t n, float b1, float b2, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = k3::situ_glu(g[i], u[i], b1, b2);
}

void silu_glu(const float* g, const float* u, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = k3::silu(g[i]) * u[i];
}
}  // namespace portable

namespace {

// Runs fn over [0, n) in pieces on the pool when there is enough work to share.
template <class Fn>
void split(int64_t n, const Fn& fn) {
  ThreadPool& pool = global_pool();
  if (n < (int64_t{1} << 15) || pool.size() == 1) {
    fn(int64_t{0}, n);
    return;
  }
  pool.parallel_for(n, 64, [&](int64_t b, int64_t e, int) { fn(b, e); });
}

}  // namespace

void sigmoid(const float* x, int64_t n, float* out) {
  const Isa isa = active_isa();
  split(n, [&](int64_t b, int64_t e) { K3_ISA_DISPATCH(isa, sigmoid(x + b, e - b, out + b)); });
}

void silu(const float* x, int64_t n, float* out) {
  const Isa isa = active_isa();
  split(n, [&](int64_t b, int64_t e) { K3_ISA_DISPATCH(isa, silu(x + b, e - b, out + b)); });
}

void mul_sigmoid(const float* x, const float* gate, int64_t n, float* out) {
  const Isa isa = active_isa();
  split(n, [&](int64_t b, int64_t e) { K3_ISA_DISPATCH(isa, mul_sigmoid(x + b, gate + b, e - b, out + b)); });
}

void situ_glu(const float* g, const float* u, int64_t n, float b1, float b2, float* out) {
  const Isa isa = active_isa();
  split(n, [&](int64_t b, int64_t e) { K3_ISA_DISPATCH(isa, situ_glu(g + b, u + b, e - b, b1, b2, out + b)); });
}

void silu_glu(const float* g, const float* u, int64_t n, float* out) {
  const Isa isa = active_isa();
  split(n, [&](int64_t b, int64_t e) { K3_ISA_DISPATCH(isa, silu_glu(g + b, u + b, e - b, out + b)); });
}

}  // namespace k3
