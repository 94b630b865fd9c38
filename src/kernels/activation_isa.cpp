// Sigmoid, SiLU, sigmoid gating, SiTU-GLU and SiLU-GLU over the level's vector type, compiled
// once per instruction-set level (kernels/simd/isa.h); every element, tails included, takes the
// vector path.
//
// tanh(x): for |x| < 0.5 the odd Taylor series through x^15 (truncation < 5e-9), else
// 1 - 2 / (e^(2|x|) + 1) with the sign of x (1 for large |x|, as e^(2|x|) saturates);
// sigmoid(x) = 1 / (1 + e^-x).  Both within a few ulp of the scalar std::tanh / std::exp forms
// in activation.h, which the tests compare them with over many inputs.
#include <cstdint>

#include "kernels/activation.h"

#include "kernels/simd/isa_begin.h"

namespace k3::K3_ISA_NS {
namespace {

using Tr = Vec;
using V = Vec::V;
constexpr int L = Vec::kLanes;

// The element operations and the loop that applies them.
struct Act {
  static V tanh(V x) {
    const V ax = Tr::abs(x);
    const V x2 = Tr::mul(ax, ax);
    V p = Tr::set1(-929569.0f / 638512875.0f);
    p = Tr::fma(p, x2, Tr::set1(21844.0f / 6081075.0f));
    p = Tr::fma(p, x2, Tr::set1(-1382.0f / 155925.0f));
    p = Tr::fma(p, x2, Tr::set1(62.0f / 2835.0f));
    p = Tr::fma(p, x2, Tr::set1(-17.0f / 315.0f));
    p = Tr::fma(p, x2, Tr::set1(2.0f / 15.0f));
    p = Tr::fma(p, x2, Tr::set1(-1.0f / 3.0f));
    const V small = Tr::fma(Tr::mul(ax, x2), p, ax);
    const V e = Tr::exp(Tr::min(Tr::add(ax, ax), Tr::set1(88.0f)));
    const V big = Tr::sub(Tr::set1(1.0f), Tr::div(Tr::set1(2.0f), Tr::add(e, Tr::set1(1.0f))));
    return Tr::copysign(Tr::select_lt(ax, Tr::set1(0.5f), small, big), x);
  }

  static V sigmoid(V x) {
    const V e = Tr::exp(Tr::min(Tr::sub(Tr::zero(), x), Tr::set1(88.0f)));
    return Tr::div(Tr::set1(1.0f), Tr::add(Tr::set1(1.0f), e));
  }

  // Applies f(a, b) -> V over n elements, the last n % L through a masked load and a partial
  // store, so every element gets the same vector arithmetic wherever it sits in the array
  // (batch invariance: a sequence's rows move within a batch).
  template <class F>
  static void apply(const float* a, const float* b, int64_t n, float* out, const F& f) {
    int64_t i = 0;
    for (; i + L <= n; i += L) Tr::store(out + i, f(Tr::load(a + i), b ? Tr::load(b + i) : Tr::zero()));
    if (i == n) return;
    const int rest = static_cast<int>(n - i);
    alignas(64) float tmp[L];
    Tr::store(tmp, f(Tr::load_first(a + i, rest), b ? Tr::load_first(b + i, rest) : Tr::zero()));
    for (int j = 0; j < rest; ++j) out[i + j] = tmp[j];
  }

  // (Element operations are function objects, not lambdas: GCC does not carry the file's target
  // pragma into a lambda's signature, and warns about the vector ABI.)
  struct Situ {
    V b1, b2;
    V operator()(V g, V u) const {
      const V a = Tr::mul(Tr::mul(b1, tanh(Tr::div(g, b1))), sigmoid(g));
      return Tr::mul(a, Tr::mul(b2, tanh(Tr::div(u, b2))));
    }
  };
  template <bool kSelf, bool kMul>
  struct SigmoidTimes {
    V operator()(V x, V m) const {
      V r = sigmoid(x);
      if constexpr (kSelf) r = Tr::mul(x, r);
      if constexpr (kMul) r = Tr::mul(r, m);
      return r;
    }
  };

  // out[i] = (b1 tanh(g/b1) sigmoid(g)) (b2 tanh(u/b2)).
  static void situ_glu(const float* g, const float* u, int64_t n, float b1, float b2, float* out) {
    apply(g, u, n, out, Situ{Tr::set1(b1), Tr::set1(b2)});
  }

  // out[i] = sigmoid(x[i]) * (mul ? mul[i] : 1) * (self ? x[i] : 1): sigmoid, silu, gating.
  template <bool kSelf, bool kMul>
  static void sigmoid_times(const float* x, const float* mul, int64_t n, float* out) {
    apply(x, kMul ? mul : nullptr, n, out, SigmoidTimes<kSelf, kMul>{});
  }

  // out[i] = g sigmoid(g) u.
  static void silu_glu(const float* g, const float* u, int64_t n, float* out) {
    apply(g, u, n, out, SigmoidTimes<true, true>{});
  }
};

}  // namespace

void sigmoid(const float* x, int64_t n, float* out) { Act::sigmoid_times<false, false>(x, nullptr, n, out); }
void silu(const float* x, int64_t n, float* out) { Act::sigmoid_times<true, false>(x, nullptr, n, out); }
void mul_sigmoid(const float* x, const float* gate, int64_t n, float* out) {
  Act::sigmoid_times<false, true>(gate, x, n, out);
}
void situ_glu(const float* g, const float* u, int64_t n, float b1, float b2, float* out) {
  Act::situ_glu(g, u, n, b1, b2, out);
}
void silu_glu(const float* g, const float* u, int64_t n, float* out) { Act::silu_glu(g, u, n, out); }

}  // namespace k3::K3_ISA_NS

#include "kernels/simd/isa_end.h"
