// AVX2 MXFP4 kernel (decode GEMV and the expert products) for CPUs without AVX-512.
//
// Activations come in the 32-group order of mxfp4_shuffle_activations (linear.h): a group's 16
// even columns, then its 16 odd ones.  So packed bytes 0-7 / 8-15 of a group hold, in their low
// nibbles, the columns of the group's vectors 0 / 1 and, in their high nibbles, those of 2 / 3.
//
// Per (row, token) the arithmetic is fixed, whatever n, the tiling or the row range:
//   each weight decoded already scaled: the E2M1 magnitude table times the group's 2^(e-127)
//   (a power-of-two scaling, exact; subnormal results are kept, this path never sets FTZ), sign
//   from bit 3;  acc = fma(w_v, x_v, acc) for the group's 4 vectors in order, groups in order;
//   y = the horizontal sum of acc.
// That is the plain fp32 dot product over the dequantised row, in the shuffled column order.
//
// Below kPanelTokens tokens, register tiles decode each group straight into registers (passes
// of up to 3 tokens).  From kPanelTokens on, each block of rows x columns is decoded once into an
// fp32 panel that stays in L1 and meets every token in the dense fp32 tile of linear_tiles.h, the
// same per-lane FMA sequence: the decode (about 0.7 vector ops per weight) is then shared by all
// the tokens.  Zen 5 with K3_ISA=avx2, k3 bench, 2 threads: expert GEMM (3072 x 3584, 36 tokens)
// 64 GFLOP/s with the former 2 x 2 register tiles (28% of the AVX2 FMA peak) -> 127 (60%); the
// one-token GEMV 7.3 / 9.4 -> 10.8 / 11.4 GB/s (w1 / w2), still bound by the decode's vector ops.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "base/aligned.h"
#include "base/numeric_types.h"
#include "kernels/linear.h"
#include "kernels/matrix.h"
#include "kernels/mxfp4.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "kernels/linear_avx2_traits.h"
#include "kernels/linear_tiles.h"

namespace k3::avx2 {
namespace {

constexpr int L = Traits::kLanes;
// Register passes of up to 3 tokens against the panel, 40 experts of 3072 x 3584, 2 threads:
// 8 tokens 1.8-2.0 ms either way, 12: 2.5 against 2.9, 16: 3.9 against 3.4, 24: 5.5 against 4.5.
constexpr int64_t kPanelTokens = 14;
// Panel: rows x columns decoded at a time (12 x 512 fp32 = 24 KB, in L1 beside 4 tokens' 8 KB of
// activations), and the tokens that meet it before the next is decoded.
constexpr int64_t kPanelRows = 4 * Traits::kDenseRows, kPanelCols = 512, kPanelTokenBlock = 96;

// Calls f.template operator()<K>() for K == k, 1 <= k <= kMax.
template <int kMax, class F>
inline void with_size(int64_t k, F&& f) {
  [&]<int... Ks>(std::integer_sequence<int, Ks...>) {
    ((k == Ks + 1 ? (f.template operator()<Ks + 1>(), 0) : 0), ...);
  }(std::make_integer_sequence<int, kMax>{});
}

struct Decoder {
  // (A written constructor: GCC compiles implicit ones without the target pragma.)
  Decoder() : magnitudes(_mm256_loadu_ps(kE2M1Values)), sign_bit(_mm256_set1_epi32(static_cast<int>(0x80000000u))) {}
  const __m256 magnitudes;  // codes 0..7
  const __m256i sign_bit;

  // The 8 weights whose codes sit in bits 0-3 of each lane (bits above 3 are ignored).
  __m256 eight(__m256 table, __m256i code) const {
    const __m256 mag = _mm256_permutevar8x32_ps(table, code);  // reads bits 0-2
    const __m256i sign = _mm256_and_si256(_mm256_slli_epi32(code, 28), sign_bit);
    return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
  }
  // A 32-group's weights times 2^(e - 127), as the 4 vectors of the shuffled order.
  void group(const uint8_t* p, uint8_t e, __m256* w) const {
    const __m256 table = _mm256_mul_ps(magnitudes, _mm256_set1_ps(e8m0_to_f32(e)));
    const __m256i b0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i b1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)));
    w[0] = eight(table, b0);
    w[1] = eight(table, b1);
    w[2] = eight(table, _mm256_srli_epi32(b0, 4));
    w[3] = eight(table, _mm256_srli_epi32(b1, 4));
  }
};

// R rows x T tokens, every column, accumulators in registers: y[t][r0 + i].
template <int R, int T>
void register_tile(const Matrix& m, const float* x, int64_t r0, float* y) {
  const int64_t cols = m.cols;
  const uint8_t* pk = static_cast<const uint8_t*>(m.data) + r0 * (cols / 2);
  const uint8_t* sc = m.scales + r0 * (cols / 32);
  const Decoder dec;
  __m256 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) acc[i][t] = _mm256_setzero_ps();
  for (int64_t g = 0; g < cols; g += 32) {
    for (int i = 0; i < R; ++i) {
      __m256 w[4];
      dec.group(pk + i * (cols / 2) + g / 2, sc[i * (cols / 32) + g / 32], w);
      for (int t = 0; t < T; ++t)
        for (int v = 0; v < 4; ++v) acc[i][t] = _mm256_fmadd_ps(w[v], _mm256_loadu_ps(x + t * cols + g + v * L), acc[i][t]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) y[t * m.rows + r0 + i] = Traits::reduce(acc[i][t]);
}

template <int R, int T>
void register_rows(const Matrix& m, const float* x, float* y, int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + R <= r1; r += R) register_tile<R, T>(m, x, r, y);
  for (; r < r1; ++r) register_tile<1, T>(m, x, r, y);
}

// Many tokens: per block of rows and of columns, decode once into the panel, then the dense
// tile (linear_tiles.h) for every token against it.
void panel_rows(const Matrix& m, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  using Tiles = tiles::Linear<Traits>;
  constexpr int R = Traits::kDenseRows, T = Traits::kDenseTokens;
  const int64_t cols = m.cols;
  const uint8_t* pk = static_cast<const uint8_t*>(m.data);
  thread_local AlignedVector<float> panel, acc;
  panel.resize(static_cast<size_t>(kPanelRows * kPanelCols));
  acc.resize(static_cast<size_t>(kPanelRows * kPanelTokenBlock * L));
  const Decoder dec;
  for (int64_t rb = r0; rb < r1; rb += kPanelRows) {
    const int64_t rn = std::min(kPanelRows, r1 - rb);
    for (int64_t tb = 0; tb < n; tb += kPanelTokenBlock) {
      const int64_t tn = std::min(kPanelTokenBlock, n - tb);
      for (int64_t ri = 0; ri < rn; ++ri) std::fill_n(&acc[ri * kPanelTokenBlock * L], tn * L, 0.0f);
      for (int64_t kc = 0; kc < cols; kc += kPanelCols) {
        const int64_t kn = std::min(kPanelCols, cols - kc);
        for (int64_t ri = 0; ri < rn; ++ri) {
          const int64_t r = rb + ri;
          float* row = &panel[ri * kPanelCols];
          for (int64_t g = 0; g < kn; g += 32) {
            __m256 w[4];
            dec.group(pk + r * (cols / 2) + (kc + g) / 2, m.scales[r * (cols / 32) + (kc + g) / 32], w);
            for (int v = 0; v < 4; ++v) _mm256_store_ps(row + g + v * L, w[v]);
          }
        }
        // Token tiles outside, so each meets all the block's rows while its activations stay in L1.
        for (int64_t ti = 0; ti < tn; ti += T) {
          with_size<T>(std::min<int64_t>(T, tn - ti), [&]<int TT>() {
            const float* xs[TT];
            for (int t = 0; t < TT; ++t) xs[t] = x + (tb + ti + t) * cols + kc;
            for (int64_t ri = 0; ri < rn; ri += R) {
              with_size<R>(std::min<int64_t>(R, rn - ri), [&]<int RR>() {
                const float* ws[RR];
                for (int i = 0; i < RR; ++i) ws[i] = &panel[(ri + i) * kPanelCols];
                Tiles::dense_tile<float, RR, TT>(ws, xs, 0, kn, false, kn, &acc[(ri * kPanelTokenBlock + ti) * L],
                                                 kPanelTokenBlock);
              });
            }
          });
        }
      }
      for (int64_t ri = 0; ri < rn; ++ri)
        for (int64_t ti = 0; ti < tn; ++ti)
          y[(tb + ti) * m.rows + rb + ri] = Traits::reduce(Traits::load(&acc[(ri * kPanelTokenBlock + ti) * L]));
    }
  }
}

}  // namespace

void linear_rows_mxfp4(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  if (n >= kPanelTokens) {
    panel_rows(w, x, n, y, r0, r1);
    return;
  }
  for (int64_t t0 = 0; t0 < n; t0 += 3) {  // passes of up to 3 tokens
    const int64_t tn = std::min<int64_t>(3, n - t0);
    const float* xt = x + t0 * w.cols;
    float* yt = y + t0 * w.rows;
    if (tn == 1) register_rows<4, 1>(w, xt, yt, r0, r1);
    else if (tn == 2) register_rows<2, 2>(w, xt, yt, r0, r1);
    else register_rows<2, 3>(w, xt, yt, r0, r1);
  }
}

}  // namespace k3::avx2
#pragma GCC pop_options
