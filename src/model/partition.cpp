#include "model/partition.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "base/error.h"
#include "base/progress.h"
#include "base/thread_pool.h"
#include "dist/row_split.h"

namespace k3 {
namespace {

enum class Use { kTrunk, kExpert };

// Every matrix of the text model once (a tied head counted once), with what reads it.
void for_each_matrix(ModelWeights& w, const std::function<void(Matrix&, Use)>& fn) {
  auto mlp = [&](MlpWeights& m, Use use) {
    for (Matrix* x : {&m.gate, &m.up, &m.down})
      if (!x->empty()) fn(*x, use);
  };
  for (LayerWeights& L : w.layers) {
    if (L.kind == LayerKind::kKda) {
      KdaWeights& k = L.kda;
      for (Matrix* x : {&k.q, &k.k, &k.v, &k.f_a, &k.f_b, &k.b, &k.g, &k.g_a, &k.g_b, &k.o})
        if (!x->empty()) fn(*x, Use::kTrunk);
    } else {
      MlaWeights& m = L.mla;
      for (Matrix* x : {&m.q_a, &m.q_b, &m.kv_a, &m.kv_b, &m.g, &m.o})
        if (!x->empty()) fn(*x, Use::kTrunk);
    }
    if (!L.moe) {
      mlp(L.dense, Use::kTrunk);
      continue;
    }
    MoeWeights& m = L.moe_w;
    for (Matrix* x : {&m.router, &m.latent_down, &m.latent_up})
      if (!x->empty()) fn(*x, Use::kTrunk);
    mlp(m.shared, Use::kTrunk);
    for (MlpWeights& e : m.experts) mlp(e, Use::kExpert);
  }
  if (!w.lm_head.empty() && w.lm_head.data != w.embed.data) fn(w.lm_head, Use::kTrunk);
}
// The read-only walk (the callbacks below never write).
void for_each_matrix(const ModelWeights& w, const std::function<void(const Matrix&, Use)>& fn) {
  for_each_matrix(const_cast<ModelWeights&>(w), [&](Matrix& m, Use use) { fn(m, use); });
}

// This rank's share of a matrix: its rows when row-split, else all of it.
uint64_t share(const Matrix& m, int rank, int ranks) {
  if (!m.row_split || ranks <= 1 || m.rows == 0) return m.bytes();
  return m.bytes() / static_cast<uint64_t>(m.rows) * static_cast<uint64_t>(dist::rows_of(m.rows, rank, ranks).count());
}

// Unmaps the pages of [p, p + n) of a file mapping from this process (they stay in the page
// cache): what was copied out of it no longer counts as this rank's memory.
void drop(const void* p, size_t n) {
  if (n == 0 || p == nullptr) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + n + page - 1) & ~(page - 1);
  ::madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

void populate(const void* p, size_t n) {
  if (n == 0 || p == nullptr) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t b = reinterpret_cast<uintptr_t>(p) + n;
#ifdef MADV_POPULATE_READ
  if (::madvise(reinterpret_cast<void*>(a), b - a, MADV_POPULATE_READ) == 0) return;
#endif
  // Kernels before 5.14: touch a byte per page.
  volatile uint8_t sink = 0;
  for (uintptr_t q = a; q < b; q += page) sink = sink + *reinterpret_cast<const volatile uint8_t*>(q);
}

}  // namespace

RankFootprint rank_footprint(const ModelWeights& w, const TextConfig& c, int rank, int ranks) {
  RankFootprint f;
  uint64_t expert_bytes = 0, experts = 0, sent_rows = 0, total_rows = 0;
  const uint64_t others = static_cast<uint64_t>(ranks > 1 ? ranks - 1 : 0);
  auto own_rows = [&](const Matrix& m) {
    return m.row_split && ranks > 1 ? static_cast<uint64_t>(dist::rows_of(m.rows, rank, ranks).count()) : 0;
  };
  for_each_matrix(w, [&](const Matrix& m, Use use) {
    const uint64_t s = share(m, rank, ranks);
    f.resident_bytes += s;
    if (!m.row_split || ranks <= 1) f.replicated_bytes += s;
    if (use == Use::kTrunk) {
      f.trunk_read_per_token += s;
      sent_rows += own_rows(m);
      if (m.row_split && ranks > 1) total_rows += static_cast<uint64_t>(m.rows);
    } else {
      expert_bytes += s;
      ++experts;
    }
  });
  // Routed experts: top_k per MoE layer, each with three products.
  int moe_layers = 0;
  uint64_t expert_rows_own = 0, expert_rows_all = 0;
  for (const LayerWeights& L : w.layers) {
    if (!L.moe || L.moe_w.experts.empty()) continue;
    ++moe_layers;
    const MlpWeights& e = L.moe_w.experts.front();  // every expert of a layer has the same shape
    for (const Matrix* m : {&e.gate, &e.up, &e.down}) {
      expert_rows_own += own_rows(*m);
      if (m->row_split && ranks > 1) expert_rows_all += static_cast<uint64_t>(m->rows);
    }
  }
  const uint64_t k = static_cast<uint64_t>(c.top_k);
  if (experts > 0) f.expert_read_per_token = expert_bytes / experts * k * static_cast<uint64_t>(moe_layers);
  f.embed_read_per_token = w.embed.bytes() / static_cast<uint64_t>(w.embed.rows > 0 ? w.embed.rows : 1);
  f.read_per_token = f.trunk_read_per_token + f.expert_read_per_token + f.embed_read_per_token;
  // The expert rows above are of one expert per layer; a token uses top_k of them.
  sent_rows += expert_rows_own * k;
  total_rows += expert_rows_all * k;
  f.sent_per_token = sent_rows * sizeof(float) * others;
  if (ranks > 1) {
    uint64_t n = w.lm_head.row_split ? 1 : 0;
    for (const LayerWeights& L : w.layers) {
      if (L.kind == LayerKind::kKda) n += 3;
      else n += L.mla.q_a.empty() ? 2 : 3;
      if (!L.moe) {
        n += 2;
        continue;
      }
      const MoeWeights& m = L.moe_w;
      n += (m.latent_down.empty() ? 0 : 1) + (m.latent_up.empty() ? 0 : 1) + (m.shared.gate.empty() ? 0 : 2);
      if (!m.experts.empty()) n += 2;  // a decoded token's top_k experts run as one group
    }
    f.collectives_per_token = n;
  }
  f.received_per_token = (total_rows - sent_rows) * sizeof(float);
  return f;
}

void read_own_rows(ModelWeights& w, int rank, int ranks) {
  // The arena: each own-row range (data, then scales) at a 64-byte boundary.
  constexpr uint64_t kAlign = 64;
  auto up = [](uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
  uint64_t arena = 0, replicated = 0;
  for_each_matrix(w, [&](Matrix& m, Use) {
    if (!m.row_split || ranks <= 1) {
      replicated += m.bytes();
      return;
    }
    const int64_t n = dist::rows_of(m.rows, rank, ranks).count();
    arena += up(m.data_bytes() / static_cast<uint64_t>(m.rows) * n) + up(m.scale_bytes() / static_cast<uint64_t>(m.rows) * n);
  });
  uint8_t* base = nullptr;
  if (arena > 0) {
    constexpr uint64_t kHuge = uint64_t{2} << 20;
    const uint64_t size = (arena + kHuge - 1) / kHuge * kHuge;
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    K3_CHECK(p != MAP_FAILED, "rank ", rank, ": cannot allocate ", arena, " bytes for this rank's rows of the weights");
    ::madvise(p, size, MADV_HUGEPAGE);  // best effort: THP may be off
    w.arenas.emplace_back(p, [size](void* q) { ::munmap(q, size); });
    base = static_cast<uint8_t*>(p);
  }
  // The copies run over the thread pool, a matrix per task, each in pieces that are unmapped
  // from the checkpoint's mapping as soon as they are copied, so that the rank never holds a
  // matrix twice.
  struct Job {
    Matrix* m;
    uint64_t at;
  };
  std::vector<Job> jobs;
  uint64_t at = 0;
  for_each_matrix(w, [&](Matrix& m, Use) {
    if (!m.row_split || ranks <= 1) return;
    const int64_t n = dist::rows_of(m.rows, rank, ranks).count();
    jobs.push_back({&m, at});
    at += up(m.data_bytes() / static_cast<uint64_t>(m.rows) * n) + up(m.scale_bytes() / static_cast<uint64_t>(m.rows) * n);
  });
  Progress progress("reading this rank's rows", arena + replicated, "B");
  for_each_matrix(w, [&](Matrix& m, Use) {
    if (m.row_split && ranks > 1) return;
    populate(m.data, m.data_bytes());
    if (m.scales != nullptr) populate(m.scales, m.scale_bytes());
    progress.advance(m.bytes());
  });
  std::mutex progress_mutex;
  auto copy = [](uint8_t* dst, const uint8_t* src, uint64_t n) {
    constexpr uint64_t kPiece = uint64_t{32} << 20;
    for (uint64_t o = 0; o < n; o += kPiece) {
      const uint64_t len = std::min(kPiece, n - o);
      std::memcpy(dst + o, src + o, len);
      drop(src + o, len);
    }
  };
  global_pool().run(static_cast<int64_t>(jobs.size()), [&](int64_t j, int) {
    Matrix& m = *jobs[static_cast<size_t>(j)].m;
    const dist::RowRange r = dist::rows_of(m.rows, rank, ranks);
    const uint64_t row = m.data_bytes() / static_cast<uint64_t>(m.rows);
    const uint64_t srow = m.scale_bytes() / static_cast<uint64_t>(m.rows);
    uint8_t* data = base + jobs[static_cast<size_t>(j)].at;
    copy(data, static_cast<const uint8_t*>(m.data) + r.r0 * row, r.count() * row);
    // Row r of the matrix stays at data + r x row: only rows [r0, r1) are ever read.
    m.data = reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(data) - static_cast<uintptr_t>(r.r0 * row));
    if (m.scales != nullptr) {
      uint8_t* scales = data + up(r.count() * row);
      copy(scales, m.scales + r.r0 * srow, r.count() * srow);
      m.scales = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(scales) - static_cast<uintptr_t>(r.r0 * srow));
    }
    m.own_rows_only = true;
    const std::lock_guard<std::mutex> lock(progress_mutex);
    progress.advance(r.count() * (row + srow));
  });
  if (base != nullptr) ::mprotect(base, (arena + (uint64_t{2} << 20) - 1) / (uint64_t{2} << 20) * (uint64_t{2} << 20), PROT_READ);
  progress.finish();
}

}  // namespace k3
