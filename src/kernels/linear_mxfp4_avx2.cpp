// AVX2 MXFP4 kernel (decode GEMV and the expert products) for CPUs without AVX-512.
//
// Activations come in the order of mxfp4_shuffle_activations_pairs (linear.h): per pair of
// 32-groups, the 8-lane vectors that a 32-byte load of the pair's packed weights decodes into (the
// low 128-bit lane holds the first group, the high one the second); a trailing odd group in the
// per-32 order (its 16 even columns, then its 16 odd ones).
//
// Per (row, token) the arithmetic is fixed, whatever n, the tiling or the row range:
//   each weight decoded already scaled: its E2M1 value times its group's 2^(e-127), a power-of-two
//   scaling, exact (subnormal results are kept: this path never sets FTZ);
//   acc = fma(w_v, x_v, acc) over the vectors in the activation order;  y = the horizontal sum.
// That is the plain fp32 dot product over the dequantised row, in the shuffled column order.
//
// Decoding a pair: the codes' bf16 bytes from two in-lane byte lookups (vpshufb), interleaved
// into words and widened to fp32 by unpacking against zero, times the lanes' scales: ~30 vector
// ops per 64 weights, against ~54 for the 8-entry table permute plus sign fix of a lone group.
//
// Decode and few tokens (below kPanelTokens): passes of up to 4 tokens through stream_tile, R
// rows x T tokens with the rows from R streams (row_streams.h), each row's pair decoded half by
// half and consumed at once by all T tokens: 4 rows for 1-2 tokens, 2 rows for 3-4 (8 FMA chains
// at most, within the 16 registers).  One token: 4 chains in flight where the 2-row register
// tile waited on the FMA latency.  From kPanelTokens on, each block of rows x columns is decoded
// once into an fp32 panel that stays in L1 and meets every token in the dense fp32 tile of
// linear_tiles.h, the same per-lane FMA sequence: the decode is then shared by all the tokens.
// Small register tiles that decode per group with the table permute would spend most of their
// time decoding: the panel lets the expert GEMM run at a large share of the AVX2 FMA peak, and
// the 4-row stream tile keeps more of the one-token GEMV's loads in flight than 2-row tiles.
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

#include "kernels/simd/isa.h"
#define K3_ISA_LEVEL K3_ISA_AVX2
#include "kernels/simd/isa_begin.h"
#include "kernels/linear_tiles.h"

namespace k3::avx2 {
namespace {

constexpr int L = Vec::kLanes;
// From this many tokens on the panel's shared decode pays for writing and re-reading the panel;
// below it, streamed passes of up to 4 tokens read the experts faster (the two are close around
// 16-20 tokens).
constexpr int64_t kPanelTokens = 17;
// Below kPanelTokens: passes of up to kPassTokens tokens through the streamed tiles
// (streamed_rows), kStreamRows[T] rows x T tokens each (2 x 4 = 8 accumulators; 3 x 3 and 4 x 3
// spill).  These beat 2-row register tiles in passes of 3 tokens at every token count below
// kPanelTokens: for 1-2 tokens more rows share each activation load, and 4-token passes use
// each decoded row for more tokens.
constexpr int kStreamRows[5] = {0, 4, 4, 2, 2};
constexpr int64_t kPassTokens = 4;
// Panel: rows x columns decoded at a time (12 x 512 fp32 = 24 KB, in L1 beside 4 tokens' 8 KB of
// activations), and the tokens that meet it before the next is decoded.
constexpr int64_t kPanelRows = 4 * Vec::kDenseRows, kPanelCols = 512, kPanelTokenBlock = 96;

// bf16 bit patterns of the 16 E2M1 codes (an E2M1 value has at most 2 significant bits, so its
// fp32 form is a bf16 followed by 16 zero bits), split into a low- and a high-byte table.
struct CodeBytes {
  alignas(16) uint8_t lo[16], hi[16];
  CodeBytes() {
    for (int c = 0; c < 16; ++c) {
      uint32_t bits;
      std::memcpy(&bits, &kE2M1Values[c], 4);
      lo[c] = static_cast<uint8_t>(bits >> 16);
      hi[c] = static_cast<uint8_t>(bits >> 24);
    }
  }
};
const CodeBytes kCodeBytes;

struct Decoder {
  // (A written constructor: GCC compiles implicit ones without the target pragma.)
  Decoder()
      : magnitudes(_mm256_loadu_ps(kE2M1Values)),
        sign_bit(_mm256_set1_epi32(static_cast<int>(0x80000000u))),
        low_nibble(_mm256_set1_epi8(0x0f)),
        lo_bytes(_mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kCodeBytes.lo)))),
        hi_bytes(_mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kCodeBytes.hi)))) {}
  const __m256 magnitudes;  // codes 0..7
  const __m256i sign_bit, low_nibble, lo_bytes, hi_bytes;

  // A pair of 32-groups (32 packed bytes: group A's in the low 128-bit lane, B's in the high one):
  // the 4 weight vectors of one nibble half (0: low nibbles, the even columns; 1: high), in the
  // order of mxfp4_shuffle_activations_pairs, times the lanes' scales (A's in lanes 0-3, B's in
  // 4-7).  Codes -> bf16 bytes by two in-lane byte lookups, interleaved into words, then widened
  // to fp32 by unpacking each word into the top half of a zeroed lane (widening with a shift and
  // a mask instead, off the shuffle units, is slower).
  void pair_half(__m256i raw, int half, __m256 scale, __m256* w) const {
    const __m256i code = half == 0 ? _mm256_and_si256(raw, low_nibble)
                                   : _mm256_and_si256(_mm256_srli_epi16(raw, 4), low_nibble);
    const __m256i lo = _mm256_shuffle_epi8(lo_bytes, code), hi = _mm256_shuffle_epi8(hi_bytes, code);
    const __m256i w0 = _mm256_unpacklo_epi8(lo, hi), w1 = _mm256_unpackhi_epi8(lo, hi);  // bytes 0-7, 8-15
    const __m256i z = _mm256_setzero_si256();
    w[0] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, w0)), scale);
    w[1] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(z, w0)), scale);
    w[2] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, w1)), scale);
    w[3] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(z, w1)), scale);
  }
  static __m256i pair_bytes(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  // 2^(e - 127) for the pair's two scale bytes (lanes 0-3, 4-7), by integer ops: each byte
  // shifted to the exponent field.  kZeros: a scale byte may be 0, the subnormal 2^-127, which
  // the exponent field cannot express.
  template <bool kZeros>
  static __m256 pair_scales(const uint8_t* e) {
    if constexpr (kZeros) return _mm256_setr_m128(_mm_set1_ps(e8m0_to_f32(e[0])), _mm_set1_ps(e8m0_to_f32(e[1])));
    uint16_t both;
    std::memcpy(&both, e, 2);
    const __m256i shifted = _mm256_sllv_epi32(_mm256_set1_epi32(both), _mm256_setr_epi32(23, 23, 23, 23, 15, 15, 15, 15));
    return _mm256_castsi256_ps(_mm256_and_si256(shifted, _mm256_set1_epi32(0x7f800000)));
  }

  // The decode unit of a row at column g (of the row's packed bytes p and scale bytes e): the
  // pair of groups [g, g + 64) when kPair, else the lone trailing group [g, g + 32).  Calls
  // use(c, w) with each 4 vectors w of columns [g + c, g + c + 32) of the activation order.
  template <bool kZeros, bool kPair, class Use>
  void unit(const uint8_t* p, const uint8_t* e, int64_t g, Use&& use) const {
    __m256 w[4];
    if constexpr (kPair) {
      const __m256i raw = pair_bytes(p + g / 2);
      const __m256 scale = pair_scales<kZeros>(e + g / 32);
      for (int half = 0; half < 2; ++half) {
        pair_half(raw, half, scale, w);
        use(32 * half, w);
      }
    } else {
      group(p + g / 2, e[g / 32], w);
      use(0, w);
    }
  }

  // A lone trailing 32-group: its 4 vectors in the per-32 order (even columns, then odd), scaled
  // through the 8-entry magnitude table, sign from bit 3.
  __m256 eight(__m256 table, __m256i code) const {
    const __m256 mag = _mm256_permutevar8x32_ps(table, code);  // reads bits 0-2
    const __m256i sign = _mm256_and_si256(_mm256_slli_epi32(code, 28), sign_bit);
    return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
  }
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

// Decode and few tokens: R rows (their packed bytes w, scale bytes e) against T tokens (token t
// at x + t * cols), every column; y[i][t * rows] = row i's sum for token t: per pair of groups,
// half 0's 4 vectors then half 1's, each into one FMA chain per (row, token).  Per pair the R
// rows' scale vectors wait in memory and each row's half is decoded and consumed before the next
// row's, so R x T accumulators, the decoder's tables and one row's temporaries fit the 16
// registers (a 4-row tile holding every row's pair and scales at once would spill).  For one
// token, 4 row streams with a software prefetch 2 KB ahead read experts from memory faster than
// 2-row register tiles; without the prefetch the streams wait on memory more.
template <int R, int T, bool kZeros>
void stream_tile(const uint8_t* const* w, const uint8_t* const* e, const float* x, int64_t cols, float* const* y,
                 int64_t rows_total) {
  constexpr int64_t kAhead = 2048;  // prefetch distance along each row stream, bytes
  const Decoder dec;
  __m256 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) acc[i][t] = _mm256_setzero_ps();
  alignas(32) float scales[R][L];
  int64_t g = 0;
  for (; g + 64 <= cols; g += 64) {
    for (int i = 0; i < R; ++i) {
      if ((g & 127) == 0) _mm_prefetch(reinterpret_cast<const char*>(w[i] + g / 2 + kAhead), _MM_HINT_T0);
      _mm256_store_ps(scales[i], Decoder::pair_scales<kZeros>(e[i] + g / 32));
    }
    for (int half = 0; half < 2; ++half)
      for (int i = 0; i < R; ++i) {
        __m256 wv[4];
        dec.pair_half(Decoder::pair_bytes(w[i] + g / 2), half, _mm256_load_ps(scales[i]), wv);
        for (int t = 0; t < T; ++t)
          for (int v = 0; v < 4; ++v)
            acc[i][t] = _mm256_fmadd_ps(wv[v], _mm256_loadu_ps(x + t * cols + g + 32 * half + v * L), acc[i][t]);
      }
  }
  if (g < cols)
    for (int i = 0; i < R; ++i)
      dec.unit<kZeros, false>(w[i], e[i], g, [&](int64_t c, const __m256* wv) {
        for (int t = 0; t < T; ++t)
          for (int v = 0; v < 4; ++v)
            acc[i][t] = _mm256_fmadd_ps(wv[v], _mm256_loadu_ps(x + t * cols + g + c + v * L), acc[i][t]);
      });
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) y[i][t * rows_total] = Vec::reduce(acc[i][t]);
}

// Decode and few tokens (T <= kPassTokens): kStreamRows[T] rows at a time, one from each
// kStreamRows[T]-th of [r0, r1) (row_streams.h); the rows left over one by one through the same
// tile (R = 1, the same chains).
template <int T>
void streamed_rows(const Matrix& m, const float* x, float* y, int64_t r0, int64_t r1) {
  const int64_t cols = m.cols;
  const uint8_t* pk = static_cast<const uint8_t*>(m.data);
  row_streams::walk<kStreamRows[T]>(r0, r1, [&]<int R>(const int64_t* rows) {
    const uint8_t* w[R];
    const uint8_t* e[R];
    float* ys[R];
    bool zeros = false;
    for (int i = 0; i < R; ++i) {
      w[i] = pk + rows[i] * (cols / 2), e[i] = m.scales + rows[i] * (cols / 32), ys[i] = y + rows[i];
      zeros = zeros || mxfp4_rows_have_zero_scale(m, rows[i], 1);
    }
    if (zeros) stream_tile<R, T, true>(w, e, x, cols, ys, m.rows);
    else stream_tile<R, T, false>(w, e, x, cols, ys, m.rows);
  });
}

// Many tokens: the blocked walk of linear_tiles.h; before each block's column chunk its rows are
// decoded into the panel, which the dense fp32 tile then reads in place of the matrix.
void panel_rows(const Matrix& m, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  using Tiles = tiles::Linear<Vec>;
  const int64_t cols = m.cols;
  const uint8_t* pk = static_cast<const uint8_t*>(m.data);
  thread_local AlignedVector<float> panel;
  panel.resize(static_cast<size_t>(kPanelRows * kPanelCols));
  const Decoder dec;
  int64_t panel_r0 = 0;  // the rows and first column the panel holds
  int64_t panel_c0 = 0;
  auto decode = [&](int64_t rb, int64_t rn, int64_t kc, int64_t ke) {
    panel_r0 = rb;
    panel_c0 = kc;
    const int64_t kn = ke - kc;
    for (int64_t ri = 0; ri < rn; ++ri) {
      const int64_t r = rb + ri;
      float* row = &panel[ri * kPanelCols];
      const uint8_t* pr = pk + r * (cols / 2) + kc / 2;
      const uint8_t* sr = m.scales + r * (cols / 32) + kc / 32;
      // (kPanelCols is a multiple of 64: only a row's last chunk can end in a lone group.)
      auto decode_row = [&]<bool kZeros>() {
        auto store = [&](int64_t g) {
          return [row, g](int64_t c, const __m256* w) {
            for (int v = 0; v < 4; ++v) _mm256_store_ps(row + g + c + v * L, w[v]);
          };
        };
        int64_t g = 0;
        for (; g + 64 <= kn; g += 64) dec.unit<kZeros, true>(pr, sr, g, store(g));
        if (g < kn) dec.unit<kZeros, false>(pr, sr, g, store(g));
      };
      if (std::memchr(sr, 0, static_cast<size_t>(kn / 32)) != nullptr) decode_row.template operator()<true>();
      else decode_row.template operator()<false>();
    }
  };
  Tiles::blocked<Vec::kDenseRows, Vec::kDenseTokens, kPanelRows, kPanelTokenBlock, kPanelCols>(
      m.rows, cols, x, n, y, r0, r1,
      [&]<int R, int T>(int64_t r, int64_t t, int64_t c0, int64_t c1, bool, float* acc) {
        const float* w[R];
        const float* xs[T];
        for (int i = 0; i < R; ++i) w[i] = &panel[(r - panel_r0 + i) * kPanelCols];
        for (int j = 0; j < T; ++j) xs[j] = x + (t + j) * cols + panel_c0;
        Tiles::dense_tile<float, R, T>(w, xs, c0 - panel_c0, c1 - panel_c0, false, c1 - panel_c0, acc, kPanelTokenBlock);
      },
      decode);
}

}  // namespace

void linear_rows_mxfp4(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  if (n >= kPanelTokens) {
    panel_rows(w, x, n, y, r0, r1);
    return;
  }
  // Passes of up to kPassTokens tokens, as even as the count allows (5 = 3 + 2, not 4 + 1).
  const int64_t passes = (n + kPassTokens - 1) / kPassTokens;
  for (int64_t p = 0, t0 = 0; p < passes; ++p) {
    const int64_t t1 = n * (p + 1) / passes;
    const float* xt = x + t0 * w.cols;
    float* yt = y + t0 * w.rows;
    switch (t1 - t0) {
      case 1: streamed_rows<1>(w, xt, yt, r0, r1); break;
      case 2: streamed_rows<2>(w, xt, yt, r0, r1); break;
      case 3: streamed_rows<3>(w, xt, yt, r0, r1); break;
      default: streamed_rows<4>(w, xt, yt, r0, r1); break;
    }
    t0 = t1;
  }
}

}  // namespace k3::avx2

#include "kernels/simd/isa_end.h"
