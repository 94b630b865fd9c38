// e^x for the vector types (simd/avx2.h, simd/avx512.h), and the constants every e^x of the
// kernels is built from: Cephes' expf.  n = round(x log2 e), r = x - n ln2 (ln2 in two parts, so
// r is exact), e^r by a degree-6 polynomial, times 2^n.
//
// The scalar forms that share these constants (mla_attention.cpp's portable build and the vision
// tile, vision/attention_kernels_impl.h) differ in where they round and how they treat the range
// (a separate multiply and add; inputs limited to [-87, 0]), so their results are their own; the
// fixtures pin each form's bits.
#pragma once

namespace k3::simd {

inline constexpr float kExpLog2e = 1.44269504088896341f;
inline constexpr float kExpLn2Hi = 0.693359375f;     // ln 2 = kExpLn2Hi + kExpLn2Lo
inline constexpr float kExpLn2Lo = -2.12194440e-4f;
inline constexpr float kExpP0 = 1.9875691500e-4f;     // e^r ~ 1 + r + r^2 (P5 + r (P4 + ... r P0))
inline constexpr float kExpP1 = 1.3981999507e-3f;
inline constexpr float kExpP2 = 8.3334519073e-3f;
inline constexpr float kExpP3 = 4.1665795894e-2f;
inline constexpr float kExpP4 = 1.6666665459e-1f;
inline constexpr float kExpP5 = 5.0000001201e-1f;

// e^x per lane over the vector type Tr, which supplies the level's pieces: exp_clamp (the range
// the reduction works on), round (to nearest), fnmadd (c - a b, one rounding), and exp_scale
// (y 2^n, with what the level does outside the range; it also sees the unclamped x).
template <class Tr>
inline typename Tr::V exp(typename Tr::V x) {
  using V = typename Tr::V;
  const V xc = Tr::exp_clamp(x);
  const V n = Tr::round(Tr::mul(xc, Tr::set1(kExpLog2e)));
  V r = Tr::fnmadd(n, Tr::set1(kExpLn2Hi), xc);
  r = Tr::fnmadd(n, Tr::set1(kExpLn2Lo), r);
  V y = Tr::set1(kExpP0);
  y = Tr::fma(y, r, Tr::set1(kExpP1));
  y = Tr::fma(y, r, Tr::set1(kExpP2));
  y = Tr::fma(y, r, Tr::set1(kExpP3));
  y = Tr::fma(y, r, Tr::set1(kExpP4));
  y = Tr::fma(y, r, Tr::set1(kExpP5));
  y = Tr::fma(y, Tr::mul(r, r), Tr::add(r, Tr::set1(1.0f)));
  return Tr::exp_scale(y, n, x);
}

}  // namespace k3::simd
