#include "kernels/linear.h"

#include <algorithm>
#include <deque>
#include <string>
#include <vector>

#include "base/aligned.h"
#include "base/cpu_features.h"
#include "base/error.h"
#include "base/thread_pool.h"
#include "base/numeric_types.h"
#include "dist/row_split.h"
#include "dist/world.h"
#include "kernels/batch_pieces.h"
#include "kernels/linear_amx.h"
#include "kernels/mxfp4.h"
#include "kernels/simd/dispatch.h"
#include "kernels/small_gemm.h"

namespace k3 {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kBf16: return "bf16";
    case Precision::kBf16All: return "bf16-all";
    case Precision::kF32: break;
  }
  return "fp32";
}

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kF32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "bf16-all") return Precision::kBf16All;
  fail("unknown precision '", name, "' (expected fp32, bf16 or bf16-all)");
}

bool bf16_dot_available() { return active_isa() >= Isa::kAvx512 && cpu_features().avx512_bf16; }

namespace portable {
void round_to_bf16(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(f32_to_bf16(x[i]));
}
}  // namespace portable

void mxfp4_shuffle_activations(const float* x, int64_t cols, float* xs) {
  for (int64_t g = 0; g < cols; g += 32)
    for (int j = 0; j < 16; ++j) {
      xs[g + j] = x[g + 2 * j];
      xs[g + 16 + j] = x[g + 2 * j + 1];
    }
}

void mxfp4_shuffle_activations_pairs(const float* x, int64_t cols, float* xs) {
  const int64_t full = cols / 64 * 64;
  for (int64_t p = 0; p < full; p += 64)
    for (int v = 0; v < 8; ++v)
      for (int l = 0; l < 8; ++l) xs[p + 8 * v + l] = x[p + 32 * (l / 4) + 2 * (4 * (v % 4) + l % 4) + v / 4];
  mxfp4_shuffle_activations(x + full, cols - full, xs + full);
}

void mxfp4_pack_bf16_activations(const float* x, int64_t cols, uint16_t* out) {
  const int64_t blocks = (cols + 127) / 128;
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = x + b * 128;
    uint16_t* o = out + b * 128;
    auto at = [&](int64_t c) { return b * 128 + c < cols ? f32_to_bf16(xb[c]) : uint16_t{0}; };
    for (int L = 0; L < 4; ++L)
      for (int m = 0; m < 8; ++m) {
        o[8 * L + m] = at(2 * (16 * L + m));
        o[32 + 8 * L + m] = at(2 * (16 * L + 8 + m));
        o[64 + 8 * L + m] = at(2 * (16 * L + m) + 1);
        o[96 + 8 * L + m] = at(2 * (16 * L + 8 + m) + 1);
      }
  }
}

void mxfp4_shuffle_activations_wide(const float* x, int64_t cols, float* xs) {
  const int64_t full = cols / 128 * 128;
  for (int64_t b = 0; b < full; b += 128)
    for (int k = 0; k < 8; ++k)
      for (int i = 0; i < 16; ++i) xs[b + 16 * k + i] = x[b + 8 * i + k];
  mxfp4_shuffle_activations(x + full, cols - full, xs + full);
}

namespace {

// Activations as the vector kernels read them (prepare()): x itself, or a copy in `buf`.
struct PreparedX {
  const float* x = nullptr;
  int64_t stride = 0;  // floats from one token to the next
};

// The AVX-512 dense GEMM: many tokens of bf16 / fp32 weights.
bool use_gemm(Isa isa, const Matrix& w, int64_t n) {
  return (isa == Isa::kAvx512 || isa == Isa::kAmx) && w.format != WeightFormat::kMxfp4 && n >= 8;
}

// Runs rows [r0, r1) on the active ISA with x prepared.
void rows_on(Isa isa, const Matrix& w, const PreparedX& x, int64_t n, float* y, int64_t r0, int64_t r1) {
  if (use_gemm(isa, w, n)) {
    avx512::linear_rows_gemm(w, x.x, x.stride, n, y, r0, r1);
    return;
  }
  K3_ISA_DISPATCH(isa, linear_rows(w, x.x, n, y, r0, r1));
}

// The vector kernels read MXFP4 activations in the shuffled order, and the AVX-512 GEMM reads
// them at a padded stride (avx512::gemm_x_stride).  buf is 64-byte aligned: the kernels'
// 64-byte activation loads must not split cache lines.  Done once per product, before the rows
// are shared out over the pool.
PreparedX prepare(Isa isa, const Matrix& w, const float* x, int64_t n, AlignedVector<float>& buf) {
  if (use_gemm(isa, w, n)) {
    const int64_t s = avx512::gemm_x_stride(w.cols);
    buf.resize(static_cast<size_t>(n * s));  // kept from call to call: only the padding is zeroed
    for (int64_t t = 0; t < n; ++t) {
      float* row = buf.data() + t * s;
      std::copy_n(x + t * w.cols, w.cols, row);
      std::fill(row + w.cols, row + s, 0.0f);
    }
    return {buf.data(), s};
  }
  if (isa == Isa::kRef || w.format != WeightFormat::kMxfp4) return {x, w.cols};
  buf.resize(static_cast<size_t>(n * w.cols));
  auto shuffle = isa >= Isa::kAvx512 ? mxfp4_shuffle_activations_wide : mxfp4_shuffle_activations_pairs;
  for (int64_t t = 0; t < n; ++t) shuffle(x + t * w.cols, w.cols, buf.data() + t * w.cols);
  return {buf.data(), w.cols};
}

// Activations for the bf16 path: on AVX512-BF16 the bf16 values themselves (64-byte aligned;
// bf16 weights: rows padded to whole 32-column steps, MXFP4: in the kernel's pair order, whole
// 128-blocks; plus 64 bytes against 4K aliasing); elsewhere their fp32 widening (for MXFP4 in
// the vector kernels' shuffled order), for the ordinary fp32 kernels.
struct Bf16Activations {
  std::vector<uint16_t> storage;
  const uint16_t* bf16 = nullptr;
  int64_t stride = 0;
  std::vector<float> widened;
  AlignedVector<float> shuffled;
  PreparedX fp32;
};

void prepare_bf16(Isa isa, const Matrix& w, const float* x, int64_t n, Bf16Activations& a) {
  const bool mx = w.format == WeightFormat::kMxfp4;
  if (!bf16_dot_available()) {
    a.widened.resize(static_cast<size_t>(n * w.cols));
    portable::round_to_bf16(x, n * w.cols, a.widened.data());
    a.fp32 = prepare(isa, w, a.widened.data(), n, a.shuffled);
    return;
  }
  a.stride = (mx ? (w.cols + 127) / 128 * 128 : (w.cols + 31) / 32 * 32) + 32;
  a.storage.assign(static_cast<size_t>(n * a.stride + 32), 0);
  uint16_t* p = a.storage.data() + ((64 - reinterpret_cast<uintptr_t>(a.storage.data()) % 64) % 64) / 2;
  for (int64_t t = 0; t < n; ++t) {
    if (mx)
      mxfp4_pack_bf16_activations(x + t * w.cols, w.cols, p + t * a.stride);
    else
      for (int64_t c = 0; c < w.cols; ++c) p[t * a.stride + c] = f32_to_bf16(x[t * w.cols + c]);
  }
  a.bf16 = p;
}

bool use_bf16(const Matrix& w, Precision p) {
  if (w.format == WeightFormat::kBF16) return p != Precision::kF32;
  return w.format == WeightFormat::kMxfp4 && p == Precision::kBf16All;
}

// Rows [r0, r1) with everything prepared.
void rows_prepared(Isa isa, const Matrix& w, const PreparedX& xp, const Bf16Activations* a, int64_t n, float* y,
                   int64_t r0, int64_t r1) {
  if (a != nullptr && a->bf16 != nullptr) {
    if (w.format == WeightFormat::kMxfp4)
      avx512::linear_rows_mxfp4_bf16dot(w, a->bf16, a->stride, n, y, r0, r1);
    else
      avx512::linear_rows_bf16dot(w, a->bf16, a->stride, n, y, r0, r1);
  } else {
    rows_on(isa, w, a != nullptr ? a->fp32 : xp, n, y, r0, r1);
  }
}

// bf16 weights on the AMX tiles: every n, so batch invariance holds at that level too.
bool use_amx(Isa isa, const Matrix& w) { return isa == Isa::kAmx && w.format == WeightFormat::kBF16; }
int amx_pieces(Precision p) { return p == Precision::kF32 ? 3 : 1; }

// The tiles' B operand for x; with `parallel`, large batches are packed on the pool (not from
// linear_rows, which may itself run inside a pool task).
void amx_pack(const Matrix& w, const float* x, int64_t n, bool parallel, Precision precision,
              amx::PackedActivations& p) {
  amx::pack_init(n, w.cols, amx_pieces(precision), p);
  ThreadPool& pool = global_pool();
  if (parallel && n >= 16 && pool.size() > 1)
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e, int) { amx::pack_tokens(x, b, e, p); });
  else
    amx::pack_tokens(x, 0, n, p);
}

}  // namespace

void linear_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1, Precision precision) {
  if (n <= 0 || r1 <= r0) return;
  const Isa isa = active_isa();
  if (use_amx(isa, w)) {
    amx::PackedActivations p;
    amx_pack(w, x, n, false, precision, p);
    amx::linear_rows(w, p, y, r0, r1);
    return;
  }
  AlignedVector<float> buf;
  Bf16Activations a;
  const bool bf = use_bf16(w, precision);
  if (bf) prepare_bf16(isa, w, x, n, a);
  rows_prepared(isa, w, bf ? PreparedX{} : prepare(isa, w, x, n, buf), bf ? &a : nullptr, n, y, r0, r1);
}

namespace {

// One job's activations as its kernel reads them (shared by jobs with the same x).
struct Prepared {
  bool amx = false, bf = false;
  amx::PackedActivations packed;
  AlignedVector<float> buf;
  Bf16Activations a;
  PreparedX xp;

  // Ready for another job; the buffers keep their capacity.
  void reset() {
    amx = bf = false;
    a.bf16 = nullptr;
    a.stride = 0;
    a.fp32 = {};
    xp = {};
  }
  size_t capacity_bytes() const {
    return packed.storage.capacity() * 2 + buf.capacity() * 4 + a.storage.capacity() * 2 + a.widened.capacity() * 4 +
           a.shuffled.capacity() * 4;
  }
};

// What linear_batch needs per call, kept per thread from call to call so that a decode step's
// products allocate nothing.  Allocating and freeing the prepared activations every call would
// make glibc trim and re-fault its heap whenever they pass its 128 KB trim threshold, which for a
// decode step's many small MXFP4 products costs far more than the kernels themselves.  Scratch
// past kKeepBytes (large prefill batches) is released after the call.
struct BatchScratch {
  static constexpr size_t kKeepBytes = size_t{64} << 20;
  std::deque<Prepared> store;  // stable addresses; entries [0, used) belong to the current call
  size_t used = 0;
  std::vector<const Prepared*> prep;
  std::vector<BatchShape> shapes;
  std::vector<BatchPiece> pieces;
  std::vector<dist::RowRange> own;  // the rows this rank computes, per job
  std::vector<int64_t> counts;
  std::vector<float> send, all;

  Prepared& next() {
    if (used == store.size()) store.emplace_back();
    Prepared& p = store[used++];
    p.reset();
    return p;
  }
  void release_if_large() {
    size_t bytes = 0;
    for (const Prepared& p : store) bytes += p.capacity_bytes();
    if (bytes > kKeepBytes) store.clear();
    used = 0;
  }
};

// Every rank's rows of the row-split jobs (split[j]) gathered into each job's y: each rank
// packs its own rows of every such job, token by token, into one message; one collective
// exchanges them all.
void exchange_rows(std::span<const LinearJob> jobs, const std::vector<uint8_t>& split, int rank, int ranks,
                   BatchScratch& scratch) {
  std::vector<int64_t>& counts = scratch.counts;
  counts.assign(static_cast<size_t>(ranks), 0);
  for (size_t j = 0; j < jobs.size(); ++j)
    if (split[j])
      for (int k = 0; k < ranks; ++k) counts[k] += jobs[j].n * dist::rows_of(jobs[j].w->rows, k, ranks).count();
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  std::vector<float>& send = scratch.send;
  std::vector<float>& all = scratch.all;
  send.resize(static_cast<size_t>(counts[rank]));
  all.resize(static_cast<size_t>(total));
  float* out = send.data();
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (!split[j]) continue;
    const int64_t rows = jobs[j].w->rows;
    const dist::RowRange r = dist::rows_of(rows, rank, ranks);
    for (int64_t t = 0; t < jobs[j].n; ++t, out += r.count()) std::copy_n(jobs[j].y + t * rows + r.r0, r.count(), out);
  }
  dist::allgather(send.data(), counts, all.data());
  const float* in = all.data();
  for (int k = 0; k < ranks; ++k) {
    if (k == rank) {
      in += counts[k];
      continue;
    }
    for (size_t j = 0; j < jobs.size(); ++j) {
      if (!split[j]) continue;
      const int64_t rows = jobs[j].w->rows;
      const dist::RowRange r = dist::rows_of(rows, k, ranks);
      for (int64_t t = 0; t < jobs[j].n; ++t, in += r.count()) std::copy_n(in, r.count(), jobs[j].y + t * rows + r.r0);
    }
  }
}

// One pass of linear_batch over at most kTokenBlock tokens per job.
void linear_batch_block(std::span<const LinearJob> jobs) {
  const Isa isa = active_isa();
  ThreadPool& pool = global_pool();
  // The thread's kept scratch, or fresh scratch for a call made from inside another one.
  thread_local BatchScratch kept;
  thread_local int depth = 0;
  BatchScratch fresh;
  BatchScratch& scratch = depth == 0 ? kept : fresh;
  struct Done {  // leaves the scratch ready for the next call, also when a kernel throws
    BatchScratch& s;
    int& depth;
    ~Done() {
      s.release_if_large();
      --depth;
    }
  } done{scratch, ++depth};
  std::vector<const Prepared*>& prep = scratch.prep;
  prep.assign(jobs.size(), nullptr);
  double total = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const LinearJob& job = jobs[j];
    if (job.n <= 0 || job.w->rows <= 0) continue;
    const Matrix& w = *job.w;
    total += static_cast<double>(w.rows) * static_cast<double>(w.cols) * static_cast<double>(job.n);
    for (size_t k = 0; k < j && prep[j] == nullptr; ++k)
      if (prep[k] != nullptr && jobs[k].x == job.x && jobs[k].n == job.n && jobs[k].w->cols == w.cols &&
          jobs[k].w->format == w.format && jobs[k].precision == job.precision)
        prep[j] = prep[k];
    if (prep[j] != nullptr) continue;
    Prepared& p = scratch.next();
    p.amx = use_amx(isa, w);
    if (p.amx) {
      amx_pack(w, job.x, job.n, true, job.precision, p.packed);
    } else {
      p.bf = use_bf16(w, job.precision);
      if (p.bf)
        prepare_bf16(isa, w, job.x, job.n, p.a);
      else
        p.xp = prepare(isa, w, job.x, job.n, p.buf);
    }
    prep[j] = &p;
  }
  if (total <= 0) return;

  // In a multi-process run this rank computes only its own rows of the row-split products and
  // then the ranks exchange them.  Only from the thread running the forward step, outside pool
  // tasks, so that every rank makes the same collective calls in the same order.
  const int ranks = depth == 1 && !in_pool_task() ? dist::size() : 1;
  const int rank = ranks > 1 ? dist::rank() : 0;
  std::vector<dist::RowRange>& own = scratch.own;
  own.assign(jobs.size(), dist::RowRange{});
  std::vector<uint8_t> split(jobs.size(), 0);
  bool any_split = false;
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (prep[j] == nullptr) continue;
    split[j] = ranks > 1 && jobs[j].w->row_split;
    own[j] = split[j] ? dist::rows_of(jobs[j].w->rows, rank, ranks) : dist::RowRange{0, jobs[j].w->rows};
    any_split |= split[j] != 0;
    K3_CHECK(split[j] || !jobs[j].w->own_rows_only, "internal error: a matrix that holds only this rank's rows (",
             jobs[j].w->rows, " x ", jobs[j].w->cols, ") was computed whole, inside a pool task or a SerialScope");
  }

  // Small products are not worth waking the workers for (AMX ones have a larger threshold).
  const bool any_amx = std::any_of(prep.begin(), prep.end(), [](const Prepared* p) { return p != nullptr && p->amx; });
  const bool serial = pool.size() == 1 || total < (any_amx ? 256.0 : 64.0) * 1024;
  std::vector<BatchShape>& shapes = scratch.shapes;
  shapes.assign(jobs.size(), BatchShape{});
  for (size_t j = 0; j < jobs.size(); ++j)
    if (prep[j] != nullptr)
      shapes[j] = {own[j].count(), static_cast<double>(jobs[j].w->cols) * static_cast<double>(jobs[j].n),
                   prep[j]->amx ? 48 : 16};
  std::vector<BatchPiece>& pieces = scratch.pieces;
  plan_batch_pieces(shapes, pool.size(), serial, pieces);
  auto run = [&](int64_t i, int) {
    const BatchPiece& pc = pieces[static_cast<size_t>(i)];
    const LinearJob& job = jobs[pc.job];
    const Prepared& p = *prep[pc.job];
    const int64_t r0 = own[pc.job].r0 + pc.r0, r1 = own[pc.job].r0 + pc.r1;
    if (p.amx)
      amx::linear_rows(*job.w, p.packed, job.y, r0, r1);
    else
      rows_prepared(isa, *job.w, p.xp, p.bf ? &p.a : nullptr, job.n, job.y, r0, r1);
  };
  if (serial)
    for (size_t i = 0; i < pieces.size(); ++i) run(static_cast<int64_t>(i), 0);
  else
    pool.run(static_cast<int64_t>(pieces.size()), run);
  if (any_split) exchange_rows(jobs, split, rank, ranks, scratch);
}

}  // namespace

void linear_batch(std::span<const LinearJob> jobs) {
  int64_t most = 0;
  for (const LinearJob& j : jobs) most = std::max(most, j.n);
  if (most <= kTokenBlock) {
    linear_batch_block(jobs);
    return;
  }
  // Token blocks one after another: a block's prepared activations stay in cache while every
  // row of the weights passes over them (a whole long prompt's would not), and each token's
  // result is the same in any block.
  std::vector<LinearJob> part(jobs.size());
  for (int64_t t0 = 0; t0 < most; t0 += kTokenBlock) {
    for (size_t j = 0; j < jobs.size(); ++j) {
      const LinearJob& job = jobs[j];
      const int64_t n = std::clamp<int64_t>(job.n - t0, 0, kTokenBlock);
      part[j] = {job.w, n > 0 ? job.x + t0 * job.w->cols : job.x, n, n > 0 ? job.y + t0 * job.w->rows : job.y,
                 job.precision};
    }
    linear_batch_block(part);
  }
}

void linear(const Matrix& w, const float* x, int64_t n, float* y, Precision precision) {
  const LinearJob job{&w, x, n, y, precision};
  linear_batch({&job, 1});
}

void linear_pair(const Matrix& a, const Matrix& b, const float* x, int64_t n, float* ya, float* yb,
                 Precision precision) {
  const LinearJob jobs[2] = {{&a, x, n, ya, precision}, {&b, x, n, yb, precision}};
  linear_batch(jobs);
}

void linear_transposed(const Matrix& w, const float* x, int64_t n, float* y) {
  switch (w.format) {  // y[n][cols] = x[n][rows] W: the outer-product form, vectorised along cols
    case WeightFormat::kF32: gemm_nn(x, static_cast<const float*>(w.data), y, n, w.rows, w.cols, false); return;
    case WeightFormat::kBF16: gemm_nn(x, static_cast<const uint16_t*>(w.data), y, n, w.rows, w.cols, false); return;
    case WeightFormat::kMxfp4:
      for (int64_t t = 0; t < n; ++t) portable::linear_transposed(w, x + t * w.rows, y + t * w.cols);
      return;
  }
}

namespace portable {

void dequant_row(const Matrix& w, int64_t r, float* out) {
  switch (w.format) {
    case WeightFormat::kF32: {
      const float* p = static_cast<const float*>(w.data) + r * w.cols;
      for (int64_t c = 0; c < w.cols; ++c) out[c] = p[c];
      return;
    }
    case WeightFormat::kBF16: {
      const uint16_t* p = static_cast<const uint16_t*>(w.data) + r * w.cols;
      for (int64_t c = 0; c < w.cols; ++c) out[c] = bf16_to_f32(p[c]);
      return;
    }
    case WeightFormat::kMxfp4:
      mxfp4_dequant_row(static_cast<const uint8_t*>(w.data) + r * (w.cols / 2), w.scales + r * (w.cols / 32), w.cols,
                        out);
      return;
  }
}

void linear_rows(const Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = r0; r < r1; ++r) {
    dequant_row(w, r, row.data());
    for (int64_t t = 0; t < n; ++t) {
      const float* xt = x + t * w.cols;
      float acc = 0.0f;
      for (int64_t c = 0; c < w.cols; ++c) acc += row[c] * xt[c];
      y[t * w.rows + r] = acc;
    }
  }
}

void linear_transposed(const Matrix& w, const float* x, float* y) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t c = 0; c < w.cols; ++c) y[c] = 0.0f;
  for (int64_t r = 0; r < w.rows; ++r) {
    dequant_row(w, r, row.data());
    const float xr = x[r];
    for (int64_t c = 0; c < w.cols; ++c) y[c] += row[c] * xr;
  }
}

}  // namespace portable
}  // namespace k3
