// Scalar storage formats found in checkpoints and their exact conversion to fp32.
// Widening (bf16/f16/f8 -> f32) is exact; narrowing (f32 -> bf16) rounds to nearest even.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace k3 {

inline float bf16_to_f32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: value = man * 2^-24
      float f = std::ldexp(static_cast<float>(man), -24);
      return (sign != 0u) ? -f : f;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// OCP FP8 E4M3 ("e4m3fn"): bias 7, no infinities, 0x7f/0xff are NaN, max 448.
inline float f8e4m3_to_f32(uint8_t v) {
  const bool neg = (v & 0x80u) != 0;
  const int exp = (v >> 3) & 0xf;
  const int man = v & 0x7;
  float f;
  if (exp == 15 && man == 7) {
    f = std::nanf("");
  } else if (exp == 0) {
    f = std::ldexp(static_cast<float>(man), -9);  // subnormal: man/8 * 2^-6
  } else {
    f = std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
  }
  return neg ? -f : f;
}

}  // namespace k3
