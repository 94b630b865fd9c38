// Vectorised SiTU-GLU and SiLU-GLU over a vector `Tr` (simd::Avx2 / simd::Avx512); included by
// activation_avx2.cpp / activation_avx512.cpp after their ISA pragma.
//
// tanh(x): for |x| < 0.5 the odd Taylor series through x^15 (truncation < 5e-9), else
// 1 - 2 / (e^(2|x|) + 1) with the sign of x (1 for large |x|, as e^(2|x|) saturates);
// sigmoid(x) = 1 / (1 + e^-x).  Both within a few ulp of the scalar std::tanh / std::exp forms
// in activation.h, which the tests compare them with over many inputs.
#pragma once

#include <cstdint>

namespace k3::act_detail {

template <class Tr>
struct Act {
  using V = typename Tr::V;
  static constexpr int L = Tr::kLanes;

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

  // out[i] = (b1 tanh(g/b1) sigmoid(g)) (b2 tanh(u/b2)); the last n % L by the scalar form.
  static int64_t situ_glu(const float* g, const float* u, int64_t n, float b1, float b2, float* out) {
    const V vb1 = Tr::set1(b1), vb2 = Tr::set1(b2);
    int64_t i = 0;
    for (; i + L <= n; i += L) {
      const V gv = Tr::load(g + i), uv = Tr::load(u + i);
      const V a = Tr::mul(Tr::mul(vb1, tanh(Tr::div(gv, vb1))), sigmoid(gv));
      Tr::store(out + i, Tr::mul(a, Tr::mul(vb2, tanh(Tr::div(uv, vb2)))));
    }
    return i;
  }

  // out[i] = g sigmoid(g) u.
  static int64_t silu_glu(const float* g, const float* u, int64_t n, float* out) {
    int64_t i = 0;
    for (; i + L <= n; i += L) {
      const V gv = Tr::load(g + i);
      Tr::store(out + i, Tr::mul(Tr::mul(gv, sigmoid(gv)), Tr::load(u + i)));
    }
    return i;
  }
};

}  // namespace k3::act_detail
