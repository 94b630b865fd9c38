#include "model/weight_store.h"

#include <sys/mman.h>

#include <thread>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "base/log.h"
#include "base/progress.h"
#include "dist/row_split.h"
#include "dist/world.h"
#include "io/numa.h"
#include "kernels/mxfp4.h"

namespace k3 {
namespace {

constexpr uint64_t kAlign = ExtentReader::kAlign;
// Pieces of one unit closer than this in a file are read as one extent (reading the gap costs
// less than another request).
constexpr uint64_t kMergeGap = uint64_t{1} << 20;

uint64_t align_down(uint64_t v) { return v / kAlign * kAlign; }
uint64_t align_up(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Every trunk matrix of a layer (the routed experts excluded), always in the same order.
template <class Layer, class F>
void visit_trunk(Layer& L, F&& f) {
  auto& k = L.kda;
  for (auto* m : {&k.q, &k.k, &k.v, &k.f_a, &k.f_b, &k.b, &k.g, &k.g_a, &k.g_b, &k.o}) f(*m);
  auto& a = L.mla;
  for (auto* m : {&a.q_a, &a.q_b, &a.kv_a, &a.kv_b, &a.g, &a.o}) f(*m);
  for (auto* m : {&L.dense.gate, &L.dense.up, &L.dense.down}) f(*m);
  auto& e = L.moe_w;
  for (auto* m : {&e.router, &e.latent_down, &e.latent_up, &e.shared.gate, &e.shared.up, &e.shared.down}) f(*m);
}

template <class M, class F>
void visit_expert(M& e, F&& f) {
  for (auto* m : {&e.gate, &e.up, &e.down}) f(*m);
}

// Anonymous memory for weights, in 2 MiB pages where the kernel gives them.
uint8_t* map_weight_memory(uint64_t bytes, const char* what) {
  if (bytes == 0) return nullptr;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("cannot allocate ", bytes >> 20, " MiB for the ", what, ": ", std::strerror(errno));
  ::madvise(p, bytes, MADV_HUGEPAGE);
  interleave_over_nodes(p, bytes);  // several NUMA nodes: read at all their bandwidths
  return static_cast<uint8_t*>(p);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Throws k3::Error naming the tensor when one of the expert's scales is NaN (0xFF).
void check_expert_scales(const MlpWeights& w, int layer, int e, bool* zero_free) {
  const char* names[3] = {"w1", "w3", "w2"};
  int k = 0;
  for (const Matrix* m : {&w.gate, &w.up, &w.down}) {
    const int i = k++;
    zero_free[i] = false;
    if (m->format != WeightFormat::kMxfp4 || m->scales == nullptr) continue;
    // Over several ranks each checks the rows it computes (and reads no others).
    const dist::RowRange own = m->row_split && dist::size() > 1 ? dist::rows_of(m->rows, dist::rank(), dist::size())
                                                                : dist::RowRange{0, m->rows};
    const int64_t groups = m->cols / 32;
    const Mxfp4ScaleScan scan = scan_mxfp4_scales(m->scales + own.r0 * groups, static_cast<size_t>(own.count() * groups));
    if (scan.first_nan >= 0) {
      const int64_t at = own.r0 * groups + scan.first_nan;
      fail("tensor 'layers.", layer, ".block_sparse_moe.experts.", e, ".", names[i],
           ".weight_scale': E8M0 scale 0xFF (NaN) at row ", at / groups, ", group ", at % groups);
    }
    zero_free[i] = !scan.has_zero;
  }
}

}  // namespace

MappedExperts::MappedExperts(const ModelWeights& w) : w_(w) {
  for (const LayerWeights& L : w.layers) {
    const size_t n = L.moe_w.experts.size();
    checked_.push_back(std::make_unique<std::atomic<bool>[]>(n));
    for (size_t i = 0; i < n; ++i) checked_.back()[i].store(false, std::memory_order_relaxed);
  }
}

std::vector<const MlpWeights*> MappedExperts::acquire(int layer, std::span<const int32_t> experts) {
  std::vector<const MlpWeights*> out;
  for (int32_t e : experts) {
    const MlpWeights& w = w_.layers[layer].moe_w.experts[e];
    std::atomic<bool>& done = checked_[layer][e];
    if (!done.load(std::memory_order_acquire)) {
      bool zero_free[3];
      check_expert_scales(w, layer, e, zero_free);
      done.store(true, std::memory_order_release);
    }
    out.push_back(&w);
  }
  return out;
}

WeightStore::WeightStore(const Checkpoint& ckpt, const ModelWeights& weights, const TextConfig& c, uint64_t budget,
                         PlanOnly)
    : w_(weights), c_(c) {
  const std::vector<std::string> paths = ckpt.shard_paths();
  for (size_t i = 0; i < paths.size(); ++i) file_index_[paths[i]] = static_cast<int>(i);
  for (const auto& [name, view] : ckpt.tensors()) {
    auto it = file_index_.find(*view->file);
    if (it == file_index_.end() || view->nbytes == 0) continue;
    tensor_of_[view->data] = Piece{view->data, it->second, view->offset, view->nbytes};
  }

  // Trunk units: each layer, then the head (lm_head; the embedding is read a row at a time
  // through the mapping).
  auto pieces_of = [&](const Matrix& m, std::vector<Piece>* out) {
    for (const void* p : {m.data, static_cast<const void*>(m.scales)}) {
      if (p == nullptr) continue;
      auto it = tensor_of_.find(p);
      // Absent: a small tensor bind_weights copied to realign; it is in memory already.
      out->push_back(it == tensor_of_.end() ? Piece{p, -1, 0, 0} : it->second);
    }
  };
  for (int l = 0; l <= c.num_layers; ++l) {
    std::vector<Piece> pieces;
    if (l < c.num_layers) visit_trunk(w_.layers[l], [&](const Matrix& m) { pieces_of(m, &pieces); });
    else pieces_of(w_.lm_head, &pieces);
    unit_plans_.push_back(make_plan(pieces));
  }
  for (const Plan& p : unit_plans_) {
    stats_.trunk_bytes += p.bytes;
    stats_.largest_unit = std::max(stats_.largest_unit, p.bytes);
  }
  // Expert slots: the largest expert of the checkpoint.
  for (int l = 0; l < c.num_layers; ++l) {
    const auto& experts = w_.layers[l].moe_w.experts;
    for (int e = 0; e < static_cast<int>(experts.size()); ++e) {
      const Plan& p = expert_plan(l, e);
      stats_.expert_slot_bytes = std::max(stats_.expert_slot_bytes, p.bytes);
      stats_.expert_bytes_total += p.bytes;
      ++stats_.expert_count;
    }
  }
  expert_plans_.clear();  // rebuilt on demand: 82k plans are not worth keeping for the few in use
  const int min_slots = stats_.expert_count > 0 ? std::max(8, 2 * c.top_k) : 0;
  const uint64_t min_cache = static_cast<uint64_t>(min_slots) * stats_.expert_slot_bytes;
  stats_.budget = budget;
  stats_.minimum_budget = stats_.largest_unit + min_cache;
  if (budget < stats_.minimum_budget) return;

  // Placement.  Every trunk byte kept resident is a byte not read again for each forward call,
  // while an expert slot saves a read only when the router comes back to its expert: so the
  // trunk gets all it can, the expert cache keeps its minimum plus what is left.  The whole
  // trunk when it fits; otherwise the largest units resident (which also shrinks the ring, sized
  // for two of the largest streamed units, or all the room left when that is less), then any
  // smaller unit that still fits.
  const int U = units();
  unit_resident_.assign(static_cast<size_t>(U), false);
  stats_.trunk_resident = stats_.trunk_bytes + min_cache <= budget;
  if (stats_.trunk_resident) {
    unit_resident_.assign(static_cast<size_t>(U), true);
    stats_.trunk_resident_bytes = stats_.trunk_bytes;
  } else {
    std::vector<int> order(static_cast<size_t>(U));
    for (int u = 0; u < U; ++u) order[static_cast<size_t>(u)] = u;
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return unit_plans_[a].bytes > unit_plans_[b].bytes; });
    const uint64_t room = budget - min_cache;
    uint64_t best_resident = 0, best_ring = 0, prefix = 0;
    int best_p = -1;
    for (int p = 0; p < U; ++p) {
      const uint64_t largest_streamed = unit_plans_[order[static_cast<size_t>(p)]].bytes;
      if (prefix + largest_streamed <= room && (best_p < 0 || prefix > best_resident)) {
        best_p = p;
        best_resident = prefix;
        // Two units read ahead where they fit; else the ring takes all the room there is.
        best_ring = prefix + 2 * largest_streamed <= room ? 2 * largest_streamed : room - prefix;
      }
      prefix += largest_streamed;
    }
    for (int p = 0; p < best_p; ++p) unit_resident_[static_cast<size_t>(order[static_cast<size_t>(p)])] = true;
    uint64_t resident = best_resident;
    for (int p = best_p + 1; p < U; ++p) {  // smaller units that still fit beside the ring
      const uint64_t b = unit_plans_[order[static_cast<size_t>(p)]].bytes;
      if (resident + b + best_ring <= room) {
        unit_resident_[static_cast<size_t>(order[static_cast<size_t>(p)])] = true;
        resident += b;
      }
    }
    stats_.trunk_resident_bytes = resident;
    stats_.ring_bytes = best_ring;
    ring_mem_bytes_ = best_ring;
  }
  trunk_mem_bytes_ = stats_.trunk_resident_bytes;
  for (int u = 0; u < U; ++u)
    if (!unit_resident_[static_cast<size_t>(u)]) streamed_units_.push_back(u);
  const uint64_t cache_bytes = budget - trunk_mem_bytes_ - ring_mem_bytes_;
  int64_t slots = stats_.expert_slot_bytes ? static_cast<int64_t>(cache_bytes / stats_.expert_slot_bytes) : 0;
  slots = std::min<int64_t>(slots, stats_.expert_count);
  stats_.expert_slots = static_cast<int>(slots);
  // Small groups: a MoE call computes the first experts while the rest are still being read
  // (the reads are queued in the order the groups take them).
  max_held_ = std::max(1, std::min(4, stats_.expert_slots / 2));
}

WeightStoreStats WeightStore::layout(const Checkpoint& ckpt, const ModelWeights& weights, const TextConfig& c,
                                     uint64_t budget) {
  return WeightStore(ckpt, weights, c, budget, PlanOnly{}).stats_;
}

WeightStore::WeightStore(const Checkpoint& ckpt, const ModelWeights& weights, const TextConfig& c, uint64_t budget,
                         int io_threads)
    : WeightStore(ckpt, weights, c, budget, PlanOnly{}) {
  if (budget < stats_.minimum_budget) {
    const int min_slots = stats_.expert_count > 0 ? std::max(8, 2 * c.top_k) : 0;
    auto mib = [](uint64_t b) { return cat(static_cast<double>(b) / (1 << 20), " MiB"); };
    fail("a weight budget of ", mib(budget), " is too small for this checkpoint: it needs at least ",
         mib(stats_.minimum_budget), " (its largest layer, ", mib(stats_.largest_unit), ", and ", min_slots,
         " expert slots of ", mib(stats_.expert_slot_bytes), ")");
  }
  const std::vector<std::string> paths = ckpt.shard_paths();
  const int64_t slots = stats_.expert_slots;
  // K3_IO=pread|uring overrides the reader's default backend (io/extent_reader.h).
  reader_ = std::make_unique<ExtentReader>(paths, io_threads, ExtentReader::backend_named(std::getenv("K3_IO")));
  // Next-layer guesses are opt-in (K3_PREDICT_EXPERTS=1): on a disk-bound decode each wrong guess
  // is a read that the chosen experts then wait behind, and where most guesses are wrong that
  // costs more than the overlap gains.
  const char* predict = std::getenv("K3_PREDICT_EXPERTS");
  predict_enabled_ = predict != nullptr && std::string(predict) == "1";
  stats_.direct_io = reader_->direct();
  stats_.io_threads = io_threads > 0 ? io_threads : 4;
  slot_mem_bytes_ = static_cast<uint64_t>(slots) * stats_.expert_slot_bytes;
  // (A throw from here on runs the destructor: the delegated-to constructor has completed.)
  trunk_mem_ = map_weight_memory(trunk_mem_bytes_, "resident trunk");
  ring_mem_ = map_weight_memory(ring_mem_bytes_, "trunk ring");
  slot_mem_ = map_weight_memory(slot_mem_bytes_, "expert cache");
  slots_.resize(static_cast<size_t>(slots));
  slot_of_.reserve(slots_.size());

  log_info("weight store: budget ", budget >> 20, " MiB; trunk ", stats_.trunk_bytes >> 20, " MiB, ",
           stats_.trunk_resident_bytes >> 20, " MiB of it resident",
           streamed_units_.empty() ? std::string()
                                   : cat(", ", streamed_units_.size(), " units streamed through a ",
                                         ring_mem_bytes_ >> 20, " MiB ring"),
           "; ", slots, " expert slots of ", stats_.expert_slot_bytes >> 10, " KiB (", slot_mem_bytes_ >> 20,
           " MiB, ", stats_.expert_count, " experts in the checkpoint); ", reader_->direct() ? "direct I/O" : "buffered I/O");

  // Read the resident units now, all at once (the readers take them in order).
  resident_layers_.resize(static_cast<size_t>(c.num_layers));
  if (trunk_mem_bytes_ > 0) {
    Progress progress("reading the trunk", trunk_mem_bytes_ >> 20, "MiB");
    std::vector<uint64_t> offsets(static_cast<size_t>(units()), 0);
    uint64_t off = 0;
    auto ticket = std::make_shared<ExtentReader::Ticket>();
    for (int u = 0; u < units(); ++u) {
      if (!unit_resident_[static_cast<size_t>(u)]) continue;
      offsets[static_cast<size_t>(u)] = off;
      submit(unit_plans_[u], trunk_mem_ + off, ticket, false);
      off += unit_plans_[u].bytes;
    }
    while (!ticket->done()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      progress.set(reader_->bytes_read() >> 20);
    }
    ticket->wait();
    progress.finish();
    for (int u = 0; u < units(); ++u) {
      if (!unit_resident_[static_cast<size_t>(u)]) continue;
      if (u < c.num_layers) {
        auto L = std::make_unique<LayerWeights>(relocate_layer(u, trunk_mem_ + offsets[static_cast<size_t>(u)]));
        check_trunk_scales(*L, u);
        resident_layers_[static_cast<size_t>(u)] = std::move(L);
      }
      else
        resident_head_ = relocate_head(trunk_mem_ + offsets[static_cast<size_t>(u)]);
    }
    stats_.trunk_bytes_read = reader_->bytes_read();
  }
  if (!streamed_units_.empty()) next_unit_ = streamed_units_.front();
}

WeightStore::~WeightStore() {
  // Reads in flight write into the buffers: wait for them before unmapping.
  for (Loaded& u : ring_)
    if (u.ticket) {
      try {
        u.ticket->wait();
      } catch (const Error&) {
      }
    }
  for (Slot& s : slots_)
    if (s.ticket) {
      try {
        s.ticket->wait();
      } catch (const Error&) {
      }
    }
  reader_.reset();
  if (trunk_mem_) ::munmap(trunk_mem_, trunk_mem_bytes_);
  if (ring_mem_) ::munmap(ring_mem_, ring_mem_bytes_);
  if (slot_mem_) ::munmap(slot_mem_, slot_mem_bytes_);
}

WeightStore::Plan WeightStore::make_plan(std::vector<Piece>& pieces) const {
  Plan plan;
  std::vector<size_t> order(pieces.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return pieces[a].file != pieces[b].file ? pieces[a].file < pieces[b].file : pieces[a].offset < pieces[b].offset;
  });
  plan.piece_offsets.assign(pieces.size(), UINT64_MAX);
  for (size_t i : order) {
    Piece& p = pieces[i];
    if (p.file < 0) continue;  // resident already
    const uint64_t b = align_down(p.offset), e = align_up(p.offset + p.bytes);
    if (!plan.extents.empty() && plan.extents.back().file == p.file && b <= plan.extents.back().end + kMergeGap) {
      Extent& x = plan.extents.back();
      const uint64_t new_end = std::max(x.end, e);
      plan.bytes += new_end - x.end;
      x.end = new_end;
    } else {
      plan.extents.push_back({p.file, b, e, plan.bytes});
      plan.bytes += e - b;
    }
    const Extent& x = plan.extents.back();
    plan.piece_offsets[i] = x.buf_off + (p.offset - x.begin);
  }
  return plan;
}

void WeightStore::submit(const Plan& plan, uint8_t* base, const std::shared_ptr<ExtentReader::Ticket>& t,
                         bool urgent) {
  for (const Extent& x : plan.extents) reader_->read(x.file, x.begin, x.end - x.begin, base + x.buf_off, t, urgent);
}

LayerWeights WeightStore::relocate_layer(int l, uint8_t* base) const {
  LayerWeights L = w_.layers[l];
  L.moe_w.experts.clear();  // experts come from the cache
  const Plan& plan = unit_plans_[l];
  size_t i = 0;
  auto move = [&](const void*& p) {
    if (p == nullptr) return;
    const uint64_t off = plan.piece_offsets[i++];
    if (off != UINT64_MAX) p = base + off;
  };
  visit_trunk(L, [&](Matrix& m) {
    move(m.data);
    const void* s = m.scales;
    move(s);
    m.scales = static_cast<const uint8_t*>(s);
  });
  return L;
}

Matrix WeightStore::relocate_head(uint8_t* base) const {
  Matrix m = w_.lm_head;
  const Plan& plan = unit_plans_.back();
  size_t i = 0;
  if (m.data != nullptr && plan.piece_offsets[i] != UINT64_MAX) m.data = base + plan.piece_offsets[i];
  if (m.data != nullptr) ++i;
  if (m.scales != nullptr && plan.piece_offsets[i] != UINT64_MAX)
    m.scales = base + plan.piece_offsets[i];
  return m;
}

// ---- trunk ring --------------------------------------------------------------------------------

void WeightStore::wait_ticket(ExtentReader::Ticket& t) {
  if (t.done()) {
    t.wait();  // rethrows a failure
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  t.wait();
  stats_.io_wait_seconds += seconds_since(t0);
}

void WeightStore::drain_ring() {
  for (Loaded& u : ring_) {
    try {
      u.ticket->wait();
    } catch (const Error&) {
      // The unit is dropped anyway.
    }
  }
  ring_.clear();
  ring_tail_ = 0;
}

void WeightStore::top_up() {
  // Start reading the next units in use order while the ring has room for them.
  for (;;) {
    const int u = next_unit_;
    if (ring_.size() >= streamed_units_.size()) return;
    const uint64_t need = unit_plans_[u].bytes;
    uint64_t at;
    if (ring_.empty()) {
      at = 0;
    } else {
      const uint64_t head = ring_.front().off;
      const uint64_t tail = ring_tail_;
      if (tail > head) {
        if (tail + need <= ring_mem_bytes_) at = tail;
        else if (need <= head) at = 0;
        else return;
      } else {
        if (tail + need <= head) at = tail;
        else return;
      }
    }
    Loaded x;
    x.unit = u;
    x.off = at;
    x.bytes = need;
    x.ticket = std::make_shared<ExtentReader::Ticket>();
    const std::shared_ptr<ExtentReader::Ticket> ticket = x.ticket;
    ring_.push_back(std::move(x));  // claimed before any chunk is queued into its memory
    submit(unit_plans_[u], ring_mem_ + at, ticket, false);
    ring_tail_ = at + need;
    next_unit_ = next_streamed(u);
  }
}

void WeightStore::check_trunk_scales(LayerWeights& L, int layer) const {
  // MXFP4 trunk matrices (none in K3, whose quantization config keeps the trunk bf16): their
  // scales are checked as an expert's are, when the bytes are in memory.
  visit_trunk(L, [&](Matrix& m) {
    if (m.format != WeightFormat::kMxfp4 || m.scales == nullptr) return;
    const Mxfp4ScaleScan scan = scan_mxfp4_scales(m.scales, m.scale_bytes());
    if (scan.first_nan >= 0)
      fail("layer ", layer, ": an MXFP4 matrix [", m.rows, ", ", m.cols, "] has the E8M0 scale 0xFF (NaN) at row ",
           scan.first_nan / (m.cols / 32), ", group ", scan.first_nan % (m.cols / 32));
    m.scales_zero_free = !scan.has_zero;
  });
}

int WeightStore::next_streamed(int u) const {
  // The streamed unit after u in forward order (units run 0..L-1, then the head, then 0 again).
  for (int i = 1; i <= units(); ++i) {
    const int v = (u + i) % units();
    if (!unit_resident_[static_cast<size_t>(v)]) return v;
  }
  return u;
}

WeightStore::Loaded& WeightStore::take_unit(int unit) {
  // Drop units read ahead for another order (a call that failed part-way, or a first call).
  while (!ring_.empty() && ring_.front().unit != unit) {
    bool later = false;
    for (const Loaded& u : ring_) later = later || u.unit == unit;
    if (!later) {
      drain_ring();
      break;
    }
    try {
      ring_.front().ticket->wait();
    } catch (const Error&) {
    }
    ring_.pop_front();
  }
  if (ring_.empty()) next_unit_ = unit;
  top_up();
  K3_CHECK(!ring_.empty() && ring_.front().unit == unit, "weight store: cannot place layer ", unit,
           " in the trunk ring");
  Loaded& x = ring_.front();
  if (!x.ready) {
    try {
      wait_ticket(*x.ticket);
    } catch (...) {
      drain_ring();  // a failed read is not kept: the next call reads the unit again
      throw;
    }
    stats_.trunk_bytes_read += x.bytes;
    if (unit < c_.num_layers) {
      auto L = std::make_unique<LayerWeights>(relocate_layer(unit, ring_mem_ + x.off));
      check_trunk_scales(*L, unit);
      x.layer = std::move(L);
    } else {
      x.head = relocate_head(ring_mem_ + x.off);
    }
    x.ready = true;
  }
  return x;
}

const LayerWeights& WeightStore::acquire_layer(int l) {
  K3_CHECK(l >= 0 && l < c_.num_layers, "weight store: no layer ", l);
  if (unit_resident_[static_cast<size_t>(l)]) return *resident_layers_[static_cast<size_t>(l)];
  return *take_unit(l).layer;
}

void WeightStore::release_layer(int l) {
  if (unit_resident_[static_cast<size_t>(l)]) return;
  if (!ring_.empty() && ring_.front().unit == l) ring_.pop_front();
  if (ring_.empty()) ring_tail_ = 0;
  // Called from destructors: reading ahead is best effort here (the next acquire tops up too).
  try {
    top_up();
  } catch (...) {
  }
}

const Matrix& WeightStore::acquire_head() {
  if (unit_resident_.back()) return resident_head_;
  return take_unit(c_.num_layers).head;
}

void WeightStore::release_head() { release_layer(c_.num_layers); }

// ---- expert cache ------------------------------------------------------------------------------

const WeightStore::Plan& WeightStore::expert_plan(int layer, int e) {
  const int64_t key = static_cast<int64_t>(layer) * c_.num_experts + e;
  auto it = expert_plans_.find(key);
  if (it != expert_plans_.end()) return it->second;
  std::vector<Piece> pieces;
  visit_expert(w_.layers[layer].moe_w.experts[e], [&](const Matrix& m) {
    for (const void* p : {m.data, static_cast<const void*>(m.scales)}) {
      if (p == nullptr) continue;
      auto t = tensor_of_.find(p);
      pieces.push_back(t == tensor_of_.end() ? Piece{p, -1, 0, 0} : t->second);
    }
  });
  if (expert_plans_.size() > 4096) expert_plans_.clear();
  return expert_plans_.emplace(key, make_plan(pieces)).first->second;
}

int WeightStore::find_victim() {
  // The unheld slot with the lowest score: its last use, plus a bonus per earlier use (capped),
  // so that experts the router keeps choosing outlive ones used once.  Empty slots first; slots
  // whose read is still in flight are passed over.
  const uint64_t bonus = static_cast<uint64_t>(std::max(1, c_.top_k)) * static_cast<uint64_t>(c_.num_layers);
  int best = -1;
  uint64_t best_score = UINT64_MAX;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.pins > 0 || s.wanted) continue;
    if (s.key < 0) return static_cast<int>(i);
    if (s.ticket && !s.ticket->done()) continue;
    const uint64_t score = s.last_use + bonus * std::min<uint32_t>(s.uses, 8);
    if (score < best_score) {
      best_score = score;
      best = static_cast<int>(i);
    }
  }
  return best;
}

void WeightStore::start_expert_read(int slot, int layer, int e, bool urgent) {
  Slot& s = slots_[slot];
  if (s.key >= 0) slot_of_.erase(s.key);
  if (s.ticket) {
    try {
      s.ticket->wait();
    } catch (const Error&) {
    }
  }
  const int64_t key = static_cast<int64_t>(layer) * c_.num_experts + e;
  const Plan& plan = expert_plan(layer, e);
  uint8_t* base = slot_mem_ + static_cast<uint64_t>(slot) * stats_.expert_slot_bytes;
  s.key = key;
  s.uses = 0;
  s.guessed = false;
  s.checked = false;
  s.ticket = std::make_shared<ExtentReader::Ticket>();
  s.w = w_.layers[layer].moe_w.experts[e];
  size_t i = 0;
  visit_expert(s.w, [&](Matrix& m) {
    if (m.data != nullptr && plan.piece_offsets[i] != UINT64_MAX) m.data = base + plan.piece_offsets[i];
    if (m.data != nullptr) ++i;
    if (m.scales != nullptr && plan.piece_offsets[i] != UINT64_MAX) m.scales = base + plan.piece_offsets[i];
    if (m.scales != nullptr) ++i;
  });
  submit(plan, base, s.ticket, urgent);
  stats_.expert_bytes_read += plan.bytes;
  slot_of_[key] = slot;
}

void WeightStore::prefetch(int layer, std::span<const int32_t> experts) {
  for (Slot& s : slots_) s.wanted = false;  // a new MoE call: the last one's requests are over
  // First the chosen experts already here, so that placing the others cannot evict them.
  for (int32_t e : experts) {
    auto it = slot_of_.find(static_cast<int64_t>(layer) * c_.num_experts + e);
    if (it == slot_of_.end()) continue;
    Slot& s = slots_[it->second];
    if (s.guessed) {  // read on a guess: a read all the same, counted as the miss it was
      ++stats_.expert_misses;
      ++stats_.expert_predicted_used;
      s.guessed = false;
    } else {
      ++stats_.expert_hits;
    }
    s.last_use = ++tick_;
    s.wanted = true;
  }
  for (int32_t e : experts) {
    const int64_t key = static_cast<int64_t>(layer) * c_.num_experts + e;
    if (slot_of_.count(key)) continue;
    const int victim = find_victim();
    if (victim < 0) continue;  // every slot is held or wanted: acquire() counts and reads it
    ++stats_.expert_misses;
    start_expert_read(victim, layer, e);
    slots_[victim].last_use = ++tick_;
    slots_[victim].wanted = true;
  }
}

void WeightStore::predict(int layer, std::span<const int32_t> experts) {
  if (!takes_predictions()) return;
  for (int32_t e : experts) {
    if (slot_of_.count(static_cast<int64_t>(layer) * c_.num_experts + e)) continue;  // here or on its way
    const int victim = find_victim();
    if (victim < 0) return;  // every slot is held, wanted or still being read
    // Behind every chosen expert's read; scored as never used, so a wrong guess is the next
    // victim (a guess in flight is passed over by find_victim).
    start_expert_read(victim, layer, e, /*urgent=*/false);
    Slot& s = slots_[victim];
    s.guessed = true;
    s.last_use = 0;
    ++stats_.expert_predicted;
  }
}

const LayerWeights* WeightStore::resident_layer(int l) const {
  if (l < 0 || l >= c_.num_layers || !unit_resident_[static_cast<size_t>(l)]) return nullptr;
  return resident_layers_[static_cast<size_t>(l)].get();
}

void WeightStore::check_expert(Slot& s, int layer, int e) {
  auto forget = [&] {  // a slot whose bytes failed is read again next time
    slot_of_.erase(s.key);
    s.key = -1;
    s.checked = false;
  };
  try {
    wait_ticket(*s.ticket);
  } catch (...) {
    forget();
    throw;
  }
  if (s.checked) return;
  bool zero_free[3];
  try {
    check_expert_scales(s.w, layer, e, zero_free);
  } catch (const Error& err) {
    forget();
    const Matrix& t = w_.layers[layer].moe_w.experts[e].gate;
    auto it = tensor_of_.find(t.data);
    fail(it != tensor_of_.end() ? reader_->path(it->second.file) + ": " : std::string(), err.what());
  }
  s.w.gate.scales_zero_free = zero_free[0];
  s.w.up.scales_zero_free = zero_free[1];
  s.w.down.scales_zero_free = zero_free[2];
  s.checked = true;
}

std::vector<const MlpWeights*> WeightStore::acquire(int layer, std::span<const int32_t> experts) {
  K3_CHECK(static_cast<int>(experts.size()) <= max_held_, "weight store: ", experts.size(),
           " experts asked at once, more than the ", max_held_, " it may hold");
  std::vector<int> held;
  auto unpin = [&] {
    for (int s : held) --slots_[s].pins;
  };
  try {
    for (int32_t e : experts) {
      const int64_t key = static_cast<int64_t>(layer) * c_.num_experts + e;
      auto it = slot_of_.find(key);
      int slot;
      if (it != slot_of_.end()) {
        slot = it->second;
      } else {
        ++stats_.expert_misses;
        slot = find_victim();
        if (slot < 0) {
          // Every unheld slot is being read or waits for a later group of this call: give up
          // those reservations (a later group reads its experts again), then choose again.
          for (Slot& s : slots_)
            if (s.pins == 0) {
              try {
                if (s.ticket) wait_ticket(*s.ticket);
              } catch (const Error&) {
                // Another expert's failed read: that slot is simply free again.
                if (s.key >= 0) slot_of_.erase(s.key);
                s.key = -1;
              }
              s.wanted = false;
            }
          slot = find_victim();
        }
        K3_CHECK(slot >= 0, "weight store: no free expert slot");
        start_expert_read(slot, layer, e);
      }
      Slot& s = slots_[slot];
      ++s.pins;
      s.wanted = false;
      s.guessed = false;
      held.push_back(slot);
      s.last_use = ++tick_;
      ++s.uses;
    }
    std::vector<const MlpWeights*> out;
    for (size_t i = 0; i < experts.size(); ++i) {
      check_expert(slots_[held[i]], layer, experts[i]);
      out.push_back(&slots_[held[i]].w);
    }
    return out;
  } catch (...) {
    unpin();
    throw;
  }
}

void WeightStore::release(int layer, std::span<const int32_t> experts) {
  for (int32_t e : experts) {
    auto it = slot_of_.find(static_cast<int64_t>(layer) * c_.num_experts + e);
    if (it != slot_of_.end() && slots_[it->second].pins > 0) --slots_[it->second].pins;
  }
}

double WeightStore::probe_trunk_read_gbps(uint64_t max_bytes) {
  constexpr uint64_t kBuffer = uint64_t{256} << 20;
  uint8_t* buf = map_weight_memory(kBuffer, "read probe");
  const uint64_t before = reader_->bytes_read();
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t issued = 0;
  try {
    for (const Plan& p : unit_plans_) {
      for (const Extent& x : p.extents) {
        for (uint64_t off = x.begin; off < x.end && issued < max_bytes;) {
          const uint64_t n = std::min(kBuffer, x.end - off);
          auto t = std::make_shared<ExtentReader::Ticket>();
          reader_->read(x.file, off, n, buf, t, false);
          t->wait();
          off += n;
          issued += n;
        }
      }
    }
  } catch (...) {
    ::munmap(buf, kBuffer);
    throw;
  }
  const double dt = seconds_since(t0);
  ::munmap(buf, kBuffer);
  bytes_read_base_ += reader_->bytes_read() - before;  // not counted as the model's reads
  return dt > 0 ? static_cast<double>(reader_->bytes_read() - before) / dt / 1e9 : 0.0;
}

WeightStoreStats WeightStore::stats() const {
  WeightStoreStats s = stats_;
  s.bytes_read = reader_->bytes_read() - bytes_read_base_;
  return s;
}

void WeightStore::reset_counters() {
  bytes_read_base_ = reader_->bytes_read();
  stats_.trunk_bytes_read = stats_.expert_bytes_read = 0;
  stats_.expert_hits = stats_.expert_misses = 0;
  stats_.io_wait_seconds = 0;
}

}  // namespace k3
