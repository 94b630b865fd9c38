// Element-wise activations, fp32.
#pragma once

#include <cmath>
#include <cstdint>

namespace k3 {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x * sigmoid(x); }
// torch.nn.functional.softplus with beta 1 and threshold 20.
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// SiTU-GLU (Kimi K3): [b1*tanh(g/b1)*sigmoid(g)] * [b2*tanh(u/b2)]; the sigmoid takes the raw g.
inline float situ_glu(float g, float u, float b1, float b2) {
  return (b1 * std::tanh(g / b1) * sigmoid(g)) * (b2 * std::tanh(u / b2));
}

// out[i] = situ_glu(g[i], u[i]) for i < n.  out may alias g.  Dispatches on active_isa()
// (vector tanh / exp within a few ulp of the scalar forms above) and spreads large arrays over
// the thread pool; every element's value depends only on its own inputs.
void situ_glu(const float* g, const float* u, int64_t n, float b1, float b2, float* out);
// out[i] = silu(g[i]) * u[i].  out may alias g.
void silu_glu(const float* g, const float* u, int64_t n, float* out);

// Arrays (out may alias the input): out[i] = sigmoid(x[i]); out[i] = silu(x[i]);
// out[i] = sigmoid(gate[i]) * x[i] (output gating).  Dispatched and split like situ_glu.
void sigmoid(const float* x, int64_t n, float* out);
void silu(const float* x, int64_t n, float* out);
void mul_sigmoid(const float* x, const float* gate, int64_t n, float* out);

// The scalar forms, element by element: the baseline-ISA level (Isa::kRef) and the tests' reference.
namespace portable {
void sigmoid(const float* x, int64_t n, float* out);
void silu(const float* x, int64_t n, float* out);
void mul_sigmoid(const float* x, const float* gate, int64_t n, float* out);
void situ_glu(const float* g, const float* u, int64_t n, float b1, float b2, float* out);
void silu_glu(const float* g, const float* u, int64_t n, float* out);
}  // namespace portable
// The vector forms (activation_isa.cpp, one build per level).
namespace avx2 {
void sigmoid(const float* x, int64_t n, float* out);
void silu(const float* x, int64_t n, float* out);
void mul_sigmoid(const float* x, const float* gate, int64_t n, float* out);
void situ_glu(const float* g, const float* u, int64_t n, float b1, float b2, float* out);
void silu_glu(const float* g, const float* u, int64_t n, float* out);
}  // namespace avx2
namespace avx512 {
void sigmoid(const float* x, int64_t n, float* out);
void silu(const float* x, int64_t n, float* out);
void mul_sigmoid(const float* x, const float* gate, int64_t n, float* out);
void situ_glu(const float* g, const float* u, int64_t n, float b1, float b2, float* out);
void silu_glu(const float* g, const float* u, int64_t n, float* out);
}  // namespace avx512

}  // namespace k3
