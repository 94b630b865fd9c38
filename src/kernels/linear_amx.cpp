// AMX-BF16 products with bf16 weights (see linear_amx.h for the arithmetic).
//
// Tiles (all 16 rows x 64 bytes): C = 16 rows x 16 columns fp32, A = 16 weight rows x one
// 32-column step read straight from the row-major matrix, B = one packed step of 16 columns.
// Decode (one column group): 3 weight tiles share the B tile, 48 rows per block, and the weights
// stream once, read straight from the matrix.  Batches: 2 weight tiles x 2 column groups; the
// steps are walked in chunks, each row block's chunk copied into a contiguous panel that all
// column groups reuse, while the chunk's packed activations stay in L2; the partial sums are
// parked in a per-thread buffer between chunks (exact: a tile store and reload changes no bits).
// Unchunked blocks that are short of rows, or widths that are not a whole number of steps, are
// copied into a zero-padded scratch block first.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/linear_amx.h"

#include "kernels/simd/isa.h"
#define K3_ISA_LEVEL K3_ISA_AMX
#include "kernels/simd/isa_begin.h"

namespace k3::amx {
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Loads the tile configuration for this thread and releases the tile state on exit.  A and B
// tiles are 16 x 64 bytes; with a single column group (decode, small batches) the C and B tiles
// are narrowed to the columns in use, which the tile unit then skips.
class TileScope {
 public:
  explicit TileScope(int columns) {
    TileConfig c;
    for (int t = 0; t < 8; ++t) c.rows[t] = 16, c.colsb[t] = 64;
    if (columns < 16)
      for (int t : {0, 1, 2, 6}) c.colsb[t] = static_cast<uint16_t>(4 * columns);
    // Not _tile_loadconfig: GCC 12 declares that it reads only 8 bytes of the configuration,
    // so the compiler may not have stored the rest by then.
    asm volatile("ldtilecfg %0" ::"m"(c));
  }
  ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

template <typename T>
T* align64(std::vector<T>& v, size_t n) {
  v.resize(n + 64 / sizeof(T));
  const uintptr_t p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<T*>((p + 63) & ~uintptr_t{63});
}

// A block of 48 rows against one column group (decode and small batches).
// Tiles: C 0-2, A 3-5, B 6.
void block_3x1(const uint16_t* a, int64_t a_row, int64_t a_step, const uint16_t* b, int64_t steps, float* c,
               int64_t c_stride, bool first) {
  const int64_t ab = a_row * 2, cb = c_stride * 4;
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
  } else {
    _tile_loadd(0, c, cb);
    _tile_loadd(1, c + 16 * c_stride, cb);
    _tile_loadd(2, c + 32 * c_stride, cb);
  }
  for (int64_t s = 0; s < steps; ++s) {
    _tile_loadd(6, b + s * 512, 64);
    _tile_loadd(3, a + s * a_step, ab);
    _tile_loadd(4, a + 16 * a_row + s * a_step, ab);
    _tile_loadd(5, a + 32 * a_row + s * a_step, ab);
    _tile_dpbf16ps(0, 3, 6);
    _tile_dpbf16ps(1, 4, 6);
    _tile_dpbf16ps(2, 5, 6);
  }
  _tile_stored(0, c, cb);
  _tile_stored(1, c + 16 * c_stride, cb);
  _tile_stored(2, c + 32 * c_stride, cb);
}

// 32 rows against two column groups (b0, b1).  Tiles: C 0-3, A 4-5, B 6-7.
void block_2x2(const uint16_t* a, int64_t a_row, int64_t a_step, const uint16_t* b0, const uint16_t* b1,
               int64_t steps, float* c, int64_t c_stride, bool first) {
  const int64_t ab = a_row * 2, cb = c_stride * 4;
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  } else {
    _tile_loadd(0, c, cb);
    _tile_loadd(1, c + 16, cb);
    _tile_loadd(2, c + 16 * c_stride, cb);
    _tile_loadd(3, c + 16 * c_stride + 16, cb);
  }
  // Software-pipelined: each tile is reloaded for the next step as soon as its last reader of
  // this step has issued, so the loads overlap the remaining products.
  _tile_loadd(4, a, ab);
  _tile_loadd(6, b0, 64);
  _tile_loadd(7, b1, 64);
  _tile_loadd(5, a + 16 * a_row, ab);
  for (int64_t s = 0; s < steps; ++s) {
    const bool more = s + 1 < steps;
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if (more) _tile_loadd(4, a + (s + 1) * a_step, ab);
    _tile_dpbf16ps(2, 5, 6);
    if (more) _tile_loadd(6, b0 + (s + 1) * 512, 64);
    _tile_dpbf16ps(3, 5, 7);
    if (more) {
      _tile_loadd(5, a + 16 * a_row + (s + 1) * a_step, ab);
      _tile_loadd(7, b1 + (s + 1) * 512, 64);
    }
  }
  _tile_stored(0, c, cb);
  _tile_stored(1, c + 16, cb);
  _tile_stored(2, c + 16 * c_stride, cb);
  _tile_stored(3, c + 16 * c_stride + 16, cb);
}

// 32 rows against one column group (the odd last group of a batch).  Tiles: C 0 and 2, A 4-5, B 6.
void block_2x1(const uint16_t* a, int64_t a_row, int64_t a_step, const uint16_t* b, int64_t steps, float* c,
               int64_t c_stride, bool first) {
  const int64_t ab = a_row * 2, cb = c_stride * 4;
  if (first) {
    _tile_zero(0);
    _tile_zero(2);
  } else {
    _tile_loadd(0, c, cb);
    _tile_loadd(2, c + 16 * c_stride, cb);
  }
  for (int64_t s = 0; s < steps; ++s) {
    _tile_loadd(6, b + s * 512, 64);
    _tile_loadd(4, a + s * a_step, ab);
    _tile_loadd(5, a + 16 * a_row + s * a_step, ab);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(2, 5, 6);
  }
  _tile_stored(0, c, cb);
  _tile_stored(2, c + 16 * c_stride, cb);
}

}  // namespace

void pack_init(int64_t n, int64_t cols, int pieces, PackedActivations& p) {
  p.n = n;
  p.cols = cols;
  p.pieces = pieces;
  p.steps = (cols + 31) / 32;
  p.groups = (n * pieces + 15) / 16;
  const size_t elems = static_cast<size_t>(p.groups * p.steps * 512);
  p.storage.assign(elems + 32, 0);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p.storage.data());
  p.data = reinterpret_cast<uint16_t*>((a + 63) & ~uintptr_t{63});
}

void pack_tokens(const float* x, int64_t t0, int64_t t1, PackedActivations& p) {
  const int64_t cols = p.cols;
  alignas(64) uint32_t pairs[16];
  for (int64_t t = t0; t < t1; ++t) {
    const float* xt = x + t * cols;
    for (int64_t s = 0; s < p.steps; ++s) {
      const int64_t c = s * 32, left = std::min<int64_t>(32, cols - c);
      const __mmask16 m0 = static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1);
      const __mmask16 m1 = static_cast<__mmask16>(left >= 32 ? 0xffff : left > 16 ? (1u << (left - 16)) - 1 : 0);
      __m512 r0 = _mm512_maskz_loadu_ps(m0, xt + c), r1 = _mm512_maskz_loadu_ps(m1, xt + c + 16);
      for (int q = 0; q < p.pieces; ++q) {
        // 32 values in order = 16 (even, odd) pairs, one per pair row of the B tile.
        const __m512i h = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(r1, r0));
        _mm512_store_si512(pairs, h);
        const int64_t j = t * p.pieces + q;
        uint16_t* dst = p.data + ((j / 16) * p.steps + s) * 512 + (j % 16) * 2;
        for (int i = 0; i < 16; ++i) std::memcpy(dst + i * 32, &pairs[i], 4);
        if (q + 1 == p.pieces) break;
        // Remainders, exact in fp32; a non-finite (or overflowed) hi leaves nothing to add.
        const __m512 w0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
        const __m512 w1 =
            _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
        const __m512i expo = _mm512_set1_epi32(0x7f800000);
        const __mmask16 f0 = _mm512_cmpneq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(w0), expo), expo);
        const __mmask16 f1 = _mm512_cmpneq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(w1), expo), expo);
        r0 = _mm512_maskz_sub_ps(f0, r0, w0);
        r1 = _mm512_maskz_sub_ps(f1, r1, w1);
      }
    }
  }
}

void linear_rows(const Matrix& w, const PackedActivations& x, float* y, int64_t r0, int64_t r1) {
  if (r1 <= r0 || x.n <= 0) return;
  const uint16_t* W = static_cast<const uint16_t*>(w.data);
  const int64_t cols = w.cols, steps = x.steps, G = x.groups, P = x.pieces;
  const int na = G == 1 ? 3 : 2;
  const int64_t rb_rows = 16 * na;
  // Batches of more than two column groups walk the steps in chunks of kPanelSteps: each row
  // block's chunk is copied once into a contiguous panel (16 KB per weight tile column, L1),
  // which every column group then reuses, while the chunk's packed activations stay in L2.
  constexpr int64_t kPanelSteps = 16;
  const bool chunked = G > 2;
  const int64_t kc = chunked ? kPanelSteps : steps;
  const int64_t sb_rows = chunked ? 4 * rb_rows : rb_rows;
  const int64_t c_stride = G * 16;  // floats per row of the partial-sum buffer
  thread_local std::vector<float> cbuf_store;
  thread_local std::vector<uint16_t> scratch_store;
  float* cbuf = align64(cbuf_store, static_cast<size_t>(sb_rows * c_stride));
  const bool direct_cols = cols % 32 == 0;
  TileScope tiles(G == 1 ? static_cast<int>(x.n * P) : 16);
  for (int64_t sb = r0; sb < r1; sb += sb_rows) {
    const int64_t se = std::min(r1, sb + sb_rows);
    for (int64_t k0 = 0; k0 < steps; k0 += kc) {
      const int64_t k1 = std::min(steps, k0 + kc), ks = k1 - k0;
      for (int64_t rb = sb; rb < se; rb += rb_rows) {
        const int64_t rn = std::min(rb_rows, se - rb);
        const uint16_t* a = W + rb * cols + k0 * 32;
        int64_t a_row = cols, a_step = 32;
        if (chunked) {  // panel [step][row][32], zero-padded past the rows and the width
          uint16_t* pa = align64(scratch_store, static_cast<size_t>(ks * rb_rows * 32));
          for (int64_t st = 0; st < ks; ++st) {
            const int64_t c0 = (k0 + st) * 32, cw = std::min<int64_t>(32, cols - c0);
            const __mmask32 m = cw >= 32 ? ~__mmask32{0} : (__mmask32{1} << cw) - 1;
            for (int64_t i = 0; i < rb_rows; ++i) {
              const __m512i v = i < rn ? _mm512_maskz_loadu_epi16(m, W + (rb + i) * cols + c0) : _mm512_setzero_si512();
              _mm512_store_si512(pa + (st * rb_rows + i) * 32, v);
            }
          }
          a = pa;
          a_row = 32;
          a_step = rb_rows * 32;
        } else if (rn < rb_rows || !direct_cols) {  // a zero-padded copy of a short or ragged block
          const int64_t width = ks * 32, c0 = k0 * 32, cw = std::min(cols, k1 * 32) - c0;
          uint16_t* sc = align64(scratch_store, static_cast<size_t>(rb_rows * width));
          std::memset(sc, 0, static_cast<size_t>(rb_rows * width) * 2);
          for (int64_t i = 0; i < rn; ++i) std::memcpy(sc + i * width, W + (rb + i) * cols + c0, cw * 2);
          a = sc;
          a_row = width;
        }
        float* c = cbuf + (rb - sb) * c_stride;
        const bool first = k0 == 0;
        if (na == 3) {
          for (int64_t g = 0; g < G; ++g) block_3x1(a, a_row, a_step, x.tile(g, k0), ks, c + g * 16, c_stride, first);
        } else {
          int64_t g = 0;
          for (; g + 2 <= G; g += 2)
            block_2x2(a, a_row, a_step, x.tile(g, k0), x.tile(g + 1, k0), ks, c + g * 16, c_stride, first);
          if (g < G) block_2x1(a, a_row, a_step, x.tile(g, k0), ks, c + g * 16, c_stride, first);
        }
      }
    }
    for (int64_t r = sb; r < se; ++r) {
      const float* cr = cbuf + (r - sb) * c_stride;
      if (P == 3)
        for (int64_t t = 0; t < x.n; ++t) y[t * w.rows + r] = (cr[3 * t] + cr[3 * t + 1]) + cr[3 * t + 2];
      else
        for (int64_t t = 0; t < x.n; ++t) y[t * w.rows + r] = cr[t * P];
    }
  }
}

}  // namespace k3::amx

#include "kernels/simd/isa_end.h"
