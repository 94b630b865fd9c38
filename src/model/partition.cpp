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

// Where a matrix is used: the trunk, or routed expert `expert` of the MoE layer `moe`.
struct Where {
  Use use = Use::kTrunk;
  const MoeWeights* moe = nullptr;
  int expert = -1;
};

// Every matrix of the text model once (a tied head counted once).
void for_each_matrix(ModelWeights& w, const std::function<void(Matrix&, const Where&)>& fn) {
  auto mlp = [&](MlpWeights& m, const Where& where) {
    for (Matrix* x : {&m.gate, &m.up, &m.down})
      if (!x->empty()) fn(*x, where);
  };
  const Where trunk;
  for (LayerWeights& L : w.layers) {
    if (L.kind == LayerKind::kKda) {
      KdaWeights& k = L.kda;
      for (Matrix* x : {&k.q, &k.k, &k.v, &k.f_a, &k.f_b, &k.b, &k.g, &k.g_a, &k.g_b, &k.o})
        if (!x->empty()) fn(*x, trunk);
    } else {
      MlaWeights& m = L.mla;
      for (Matrix* x : {&m.q_a, &m.q_b, &m.kv_a, &m.kv_b, &m.g, &m.o})
        if (!x->empty()) fn(*x, trunk);
    }
    if (!L.moe) {
      mlp(L.dense, trunk);
      continue;
    }
    MoeWeights& m = L.moe_w;
    for (Matrix* x : {&m.router, &m.latent_down, &m.latent_up})
      if (!x->empty()) fn(*x, trunk);
    mlp(m.shared, trunk);
    for (size_t e = 0; e < m.experts.size(); ++e) mlp(m.experts[e], {Use::kExpert, &m, static_cast<int>(e)});
  }
  if (!w.lm_head.empty() && w.lm_head.data != w.embed.data) fn(w.lm_head, trunk);
}
// The read-only walk (the callbacks below never write).
void for_each_matrix(const ModelWeights& w, const std::function<void(const Matrix&, const Where&)>& fn) {
  for_each_matrix(const_cast<ModelWeights&>(w), [&](Matrix& m, const Where& where) { fn(m, where); });
}

// One rank's view of the weights under a layout: which matrices it holds, and which rows.
struct View {
  int rank = 0, ranks = 1;
  bool spread = false;  // the throughput layout over several ranks: experts placed whole
  int replicas = 0;

  bool holds(const Where& w) const {
    if (w.use != Use::kExpert || !spread) return true;
    return (rank - w.expert % ranks + ranks) % ranks <= replicas;  // as dist::ExpertPlacement
  }
  // Whether the rank holds only its own rows of m (dist/row_split.h).
  bool split(const Matrix& m, const Where& w) const {
    return ranks > 1 && (w.use == Use::kExpert ? !spread : m.row_split);
  }
  dist::RowRange rows(const Matrix& m, const Where& w) const {
    return split(m, w) ? dist::rows_of(m.rows, rank, ranks) : dist::RowRange{0, m.rows};
  }
  // Its share of m in bytes (0 for another rank's expert).
  uint64_t share(const Matrix& m, const Where& w) const {
    if (m.rows == 0 || !holds(w)) return 0;
    return m.bytes() / static_cast<uint64_t>(m.rows) * static_cast<uint64_t>(rows(m, w).count());
  }
  // Whether the rank copies what it holds of m into its arena (else it is read where it is
  // mapped): its rows of a split matrix, and a whole routed expert placed on it.
  bool in_arena(const Matrix& m, const Where& w) const {
    return ranks > 1 && holds(w) && (split(m, w) || (w.use == Use::kExpert && spread));
  }
};

View view_of(int rank, int ranks, dist::Layout layout, int replicas) {
  return {rank, ranks, layout == dist::Layout::kThroughput && ranks > 1, replicas};
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

RankFootprint rank_footprint(const ModelWeights& w, const TextConfig& c, int rank, int ranks, dist::Layout layout,
                             int replicas) {
  const View v = view_of(rank, ranks, layout, replicas);
  RankFootprint f;
  uint64_t expert_bytes = 0, experts = 0, sent_rows = 0, total_rows = 0;
  const uint64_t others = static_cast<uint64_t>(ranks > 1 ? ranks - 1 : 0);
  auto own_rows = [&](const Matrix& m, const Where& where) {
    return v.split(m, where) ? static_cast<uint64_t>(v.rows(m, where).count()) : 0;
  };
  for_each_matrix(w, [&](const Matrix& m, const Where& where) {
    if (!v.holds(where)) return;
    const uint64_t s = v.share(m, where);
    f.resident_bytes += s;
    if (ranks <= 1 || (where.use == Use::kTrunk && !v.split(m, where))) f.replicated_bytes += s;
    if (where.use == Use::kTrunk) {
      f.trunk_read_per_token += s;
      sent_rows += own_rows(m, where);
      if (v.split(m, where)) total_rows += static_cast<uint64_t>(m.rows);
    } else {
      expert_bytes += s;
      ++experts;
    }
  });
  // Routed experts: top_k per MoE layer, each with three products.  Latency layout: every rank
  // computes its rows of each of them.  Throughput layout: a rank runs top_k / R of the pairs
  // (the mean, which the plan reaches when replicas allow), each on its whole expert, and sends
  // their latent-wide outputs to every other rank.
  int moe_layers = 0;
  const bool parallel = v.spread;
  uint64_t expert_rows_own = 0, expert_rows_all = 0, inner = 0;
  for (const LayerWeights& L : w.layers) {
    if (!L.moe || L.moe_w.experts.empty()) continue;
    ++moe_layers;
    const MlpWeights& e = L.moe_w.experts.front();  // every expert of a layer has the same shape
    const Where where{Use::kExpert, &L.moe_w, 0};
    inner = static_cast<uint64_t>(e.down.rows);
    for (const Matrix* m : {&e.gate, &e.up, &e.down}) {
      expert_rows_own += own_rows(*m, where);
      if (v.split(*m, where)) expert_rows_all += static_cast<uint64_t>(m->rows);
    }
  }
  const uint64_t k = static_cast<uint64_t>(c.top_k);
  const uint64_t layers = static_cast<uint64_t>(moe_layers);
  if (experts > 0) {
    f.expert_read_per_token = expert_bytes / experts * k * layers;
    if (parallel) f.expert_read_per_token /= static_cast<uint64_t>(ranks);  // (the mean)
  }
  f.embed_read_per_token = w.embed.bytes() / static_cast<uint64_t>(w.embed.rows > 0 ? w.embed.rows : 1);
  f.read_per_token = f.trunk_read_per_token + f.expert_read_per_token + f.embed_read_per_token;
  // The expert rows above are of one expert per layer; a token uses top_k of them.
  sent_rows += expert_rows_own * k;
  total_rows += expert_rows_all * k;
  f.sent_per_token = sent_rows * sizeof(float) * others;
  f.received_per_token = (total_rows - sent_rows) * sizeof(float);
  if (parallel) {
    const uint64_t pair_bytes = inner * sizeof(float) * layers;
    f.sent_per_token += pair_bytes * k * others / static_cast<uint64_t>(ranks);
    f.received_per_token += pair_bytes * k * others / static_cast<uint64_t>(ranks);
  }
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
      // A decoded token's top_k experts run as one group: two exchanges of their rows, or one
      // of their outputs.
      if (!m.experts.empty()) n += parallel ? 1 : 2;
    }
    f.collectives_per_token = n;
  }
  return f;
}

void apply_layout(ModelWeights& w, dist::Layout layout, int ranks, int replicas) {
  const bool spread = layout == dist::Layout::kThroughput && ranks > 1;
  for (LayerWeights& L : w.layers) {
    if (!L.moe) continue;
    MoeWeights& m = L.moe_w;
    m.placement = spread ? dist::ExpertPlacement(static_cast<int>(m.experts.size()), ranks, replicas)
                         : dist::ExpertPlacement();
    for (MlpWeights& e : m.experts)
      for (Matrix* x : {&e.gate, &e.up, &e.down}) x->row_split = !spread;
  }
}

void read_own_rows(ModelWeights& w, int rank, int ranks) {
  dist::Layout layout = dist::Layout::kLatency;
  int replicas = 0;
  for (const LayerWeights& L : w.layers)
    if (L.moe && L.moe_w.placement.parallel()) {
      layout = dist::Layout::kThroughput;
      replicas = L.moe_w.placement.replicas();
    }
  const View v = view_of(rank, ranks, layout, replicas);
  // The arena: each own-row range (data, then scales) at a 64-byte boundary.
  constexpr uint64_t kAlign = 64;
  auto up = [](uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
  uint64_t arena = 0, replicated = 0;
  for_each_matrix(w, [&](Matrix& m, const Where& where) {
    if (!v.holds(where)) return;
    if (!v.in_arena(m, where)) {
      replicated += m.bytes();
      return;
    }
    const int64_t n = v.rows(m, where).count();
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
    dist::RowRange r;
    uint64_t at;
  };
  std::vector<Job> jobs;
  uint64_t at = 0;
  for_each_matrix(w, [&](Matrix& m, const Where& where) {
    if (!v.in_arena(m, where)) return;
    const int64_t n = v.rows(m, where).count();
    jobs.push_back({&m, v.rows(m, where), at});
    at += up(m.data_bytes() / static_cast<uint64_t>(m.rows) * n) + up(m.scale_bytes() / static_cast<uint64_t>(m.rows) * n);
  });
  Progress progress("reading this rank's rows", arena + replicated, "B");
  for_each_matrix(w, [&](Matrix& m, const Where& where) {
    if (!v.holds(where) || v.in_arena(m, where)) return;
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
    const dist::RowRange r = jobs[static_cast<size_t>(j)].r;
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
    m.own_rows_only = m.row_split;
    const std::lock_guard<std::mutex> lock(progress_mutex);
    progress.advance(r.count() * (row + srow));
  });
  if (base != nullptr) ::mprotect(base, (arena + (uint64_t{2} << 20) - 1) / (uint64_t{2} << 20) * (uint64_t{2} << 20), PROT_READ);
  progress.finish();
}

}  // namespace k3
