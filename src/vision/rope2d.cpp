#include "vision/rope2d.h"

#include <cmath>

namespace k3 {

Rope2D::Rope2D(int head_dim, float theta) : head_dim_(head_dim), freqs_(head_dim / 4) {
  for (int i = 0; i < head_dim / 4; ++i)
    freqs_[i] = 1.0f / std::pow(theta, static_cast<float>(4 * i) / static_cast<float>(head_dim));
}

void Rope2D::apply(float* x, int heads, int row, int col) const {
  for (int k = 0; k < head_dim_ / 2; ++k) {
    const float angle = static_cast<float>(k % 2 == 0 ? col : row) * freqs_[k / 2];
    const float c = std::cos(angle), s = std::sin(angle);
    for (int h = 0; h < heads; ++h) {
      float* v = x + static_cast<int64_t>(h) * head_dim_ + 2 * k;
      const float re = v[0], im = v[1];
      v[0] = re * c - im * s;
      v[1] = re * s + im * c;
    }
  }
}

}  // namespace k3
