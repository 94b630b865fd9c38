// Where a checkpoint's matrices are while the model runs, when they do not all fit in memory:
// the weight store keeps them within a byte budget and reads the rest with direct I/O
// (io/extent_reader.h) as the forward pass needs them.
//
//  - The trunk (every matrix but the routed experts, in units of one layer plus the lm_head) is
//    resident when it fits in the budget next to a minimal expert cache: read once, at load, by
//    several readers.  Otherwise its largest units that fit stay resident and the others stream
//    through a ring of one or two of the largest streamed units: while layer l computes, the
//    next streamed layers are read.
//  - Routed experts live in a cache of fixed-size slots (the rest of the budget).  A MoE layer
//    asks for the experts its router chose the moment it has run (prefetch), then holds a group
//    of them while their products run (acquire / release).  Eviction takes the slot whose
//    expert has gone unused longest, weighted by how often it was used (experts a model keeps
//    choosing stay).  Each expert's E8M0 scales are checked when its bytes arrive: a NaN scale
//    (0xFF) fails the forward call naming the tensor, and a slot without any 0x00 scale sets
//    Matrix::scales_zero_free for the kernels.
//
// The kernels read the same bytes whatever the budget, in the same order, so logits and tokens
// are byte-identical at every budget (tests/model/weight_store_test.cpp).  The store is used by
// one forward call at a time (Model::forward holds its lock).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/checkpoint.h"
#include "io/extent_reader.h"
#include "model/weights.h"

namespace k3 {

// Supplies the routed experts of MoE layers to moe_forward (model/ffn.h).
class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  // How many experts one MoE call may hold at once (it runs its experts in groups of at most this).
  virtual int max_held() const = 0;
  // The router of `layer` chose `experts`: start reading the ones that are not in memory.
  virtual void prefetch(int layer, std::span<const int32_t> experts) = 0;
  // Waits until each of `experts` (at most max_held(), distinct) is readable and returns their
  // weights in that order; they stay valid until release().  Throws k3::Error (a read error, a
  // NaN scale), holding nothing then.
  virtual std::vector<const MlpWeights*> acquire(int layer, std::span<const int32_t> experts) = 0;
  virtual void release(int layer, std::span<const int32_t> experts) = 0;
  // Whether predict() does anything: the model computes guesses only for a source that reads.
  virtual bool takes_predictions() const { return false; }
  // A guess at the experts `layer` will choose (its router applied to an earlier layer's input):
  // a source may start reading them behind the reads already asked for, into slots it would
  // evict first if the guess was wrong.  Never changes what acquire() returns.
  virtual void predict(int /*layer*/, std::span<const int32_t> /*experts*/) {}
};

// The experts where bind_weights left them (read into memory, or mapped from the page cache),
// each one's E8M0 scales checked for NaN (0xFF) the first time a MoE layer uses it, so that
// loading a mapped checkpoint reads no expert bytes.  Thread-safe.
class MappedExperts final : public ExpertSource {
 public:
  explicit MappedExperts(const ModelWeights& w);
  int max_held() const override { return 1 << 30; }
  void prefetch(int, std::span<const int32_t>) override {}
  std::vector<const MlpWeights*> acquire(int layer, std::span<const int32_t> experts) override;
  void release(int, std::span<const int32_t>) override {}

 private:
  const ModelWeights& w_;
  std::vector<std::unique_ptr<std::atomic<bool>[]>> checked_;  // per layer, per expert
};

struct WeightStoreStats {
  uint64_t budget = 0;            // bytes the store may use
  uint64_t minimum_budget = 0;    // the largest trunk unit + the minimal expert cache
  uint64_t trunk_bytes = 0;       // all trunk units (aligned for direct reads)
  bool trunk_resident = false;    // all of it read once at load
  uint64_t trunk_resident_bytes = 0;  // the units kept resident (all, or the largest that fit)
  uint64_t ring_bytes = 0;        // the ring the other units stream through (0 when all resident)
  uint64_t largest_unit = 0;      // the largest trunk unit
  uint64_t expert_slot_bytes = 0; // one slot (the largest expert, aligned)
  int expert_slots = 0;
  uint64_t expert_bytes_total = 0;  // all routed experts of the checkpoint
  int64_t expert_count = 0;
  bool direct_io = false;         // every file read with O_DIRECT
  int io_threads = 0;
  // Since load (reset_counters() clears these):
  uint64_t bytes_read = 0;        // trunk and experts
  uint64_t trunk_bytes_read = 0;
  uint64_t expert_bytes_read = 0;
  uint64_t expert_hits = 0;       // expert requests found in memory (or already on their way)
  uint64_t expert_misses = 0;     // expert requests that needed a read
  uint64_t expert_predicted = 0;  // reads started by a next-layer guess (counted in expert_bytes_read)
  uint64_t expert_predicted_used = 0;  // of those, experts the layer then chose
  double io_wait_seconds = 0;     // forward time spent waiting for reads

  // The memory the store holds for weights: resident trunk, ring and expert slots.
  uint64_t held_bytes() const {
    return trunk_resident_bytes + ring_bytes + static_cast<uint64_t>(expert_slots) * expert_slot_bytes;
  }
};

class WeightStore final : public ExpertSource {
 public:
  // weights: bound against ckpt (kMapped or kStreamed: its matrix pointers identify the tensors).
  // Throws k3::Error when the budget is below the smallest that works (the largest trunk unit
  // plus a minimal expert cache; the message names both) or a read fails.
  WeightStore(const Checkpoint& ckpt, const ModelWeights& weights, const TextConfig& c, uint64_t budget,
              int io_threads = 0);
  ~WeightStore() override;
  // The placement `budget` gives this checkpoint (sizes, resident or streamed trunk, slots),
  // computed without allocating or reading anything (k3 plan, k3 inspect).  When the budget is
  // below minimum_budget, only the sizes and minimum_budget are set.
  static WeightStoreStats layout(const Checkpoint& ckpt, const ModelWeights& weights, const TextConfig& c,
                                 uint64_t budget);
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

  // The trunk of layer l (experts excluded: use the ExpertSource side), readable until
  // release_layer(l).  Layers are taken in order 0..L-1, then the head; any other order is
  // served too (the ring restarts there).
  const LayerWeights& acquire_layer(int l);
  void release_layer(int l);
  const Matrix& acquire_head();
  void release_head();

  int max_held() const override { return max_held_; }
  void prefetch(int layer, std::span<const int32_t> experts) override;
  std::vector<const MlpWeights*> acquire(int layer, std::span<const int32_t> experts) override;
  void release(int layer, std::span<const int32_t> experts) override;
  bool takes_predictions() const override { return stats_.trunk_resident && predict_enabled_; }
  void predict(int layer, std::span<const int32_t> experts) override;
  // Layer l's trunk when it is resident (readable at any time), else nullptr.
  const LayerWeights* resident_layer(int l) const;
  // Guessing is on by default; off, the store reads only what layers chose (K3_PREDICT_EXPERTS=0).
  void set_predict(bool on) { predict_enabled_ = on; }

  // Reads the trunk's extents (the bytes a streamed decode reads, in its order) with the store's
  // reader into a scratch buffer, up to max_bytes, and returns GB/s: the disk limit a streamed
  // decode is measured against, taken over the same bytes (a disk or hypervisor cache treats
  // both alike).  Not while a forward call runs.
  double probe_trunk_read_gbps(uint64_t max_bytes);
  WeightStoreStats stats() const;
  void reset_counters();
  // Held by Model::forward for the whole call.
  std::mutex& forward_mutex() { return forward_mu_; }

 private:
  struct Extent {
    int file;
    uint64_t begin, end;  // aligned file range
    uint64_t buf_off;     // where it lands in the unit's (or slot's) buffer
  };
  struct Piece {  // one matrix's data or scales
    const void* src;
    int file;
    uint64_t offset, bytes;
    uint64_t buf_off = 0;
  };
  struct Plan {  // how one unit or expert is laid out in its buffer
    std::vector<Extent> extents;
    std::vector<uint64_t> piece_offsets;  // buffer offset of each piece, in visiting order
    uint64_t bytes = 0;
  };
  struct Loaded {  // a trunk unit in the ring
    int unit;
    uint64_t off, bytes;
    std::shared_ptr<ExtentReader::Ticket> ticket;
    std::unique_ptr<LayerWeights> layer;  // relocated, built when first acquired
    Matrix head;
    bool ready = false;
  };
  struct Slot {
    int64_t key = -1;  // layer * num_experts + expert
    int pins = 0;
    uint64_t last_use = 0;
    uint32_t uses = 0;
    bool wanted = false;  // prefetched for the MoE call in progress: not evicted before its acquire
    bool guessed = false;  // read on a guess (predict) and not chosen since
    std::shared_ptr<ExtentReader::Ticket> ticket;
    bool checked = false;
    MlpWeights w;
  };

  struct PlanOnly {};
  WeightStore(const Checkpoint& ckpt, const ModelWeights& weights, const TextConfig& c, uint64_t budget, PlanOnly);
  Plan make_plan(std::vector<Piece>& pieces) const;
  void submit(const Plan& plan, uint8_t* base, const std::shared_ptr<ExtentReader::Ticket>& t, bool urgent);
  LayerWeights relocate_layer(int l, uint8_t* base) const;
  Matrix relocate_head(uint8_t* base) const;
  int units() const { return static_cast<int>(unit_plans_.size()); }
  int next_streamed(int u) const;
  void check_trunk_scales(LayerWeights& L, int layer) const;
  Loaded& take_unit(int unit);
  void top_up();
  void drain_ring();
  void wait_ticket(ExtentReader::Ticket& t);
  const Plan& expert_plan(int layer, int e);
  int find_victim();
  void start_expert_read(int slot, int layer, int e, bool urgent = true);
  void check_expert(Slot& s, int layer, int e);

  const ModelWeights& w_;
  const TextConfig& c_;
  std::unique_ptr<ExtentReader> reader_;
  std::unordered_map<const void*, Piece> tensor_of_;  // matrix data/scales pointer -> file range
  std::unordered_map<std::string, int> file_index_;
  std::vector<Plan> unit_plans_;  // layers, then the head

  WeightStoreStats stats_;
  std::vector<bool> unit_resident_;
  std::vector<int> streamed_units_;
  uint8_t* trunk_mem_ = nullptr;  // the resident units
  uint64_t trunk_mem_bytes_ = 0;
  uint8_t* ring_mem_ = nullptr;   // the ring the streamed units pass through
  uint64_t ring_mem_bytes_ = 0;
  // Resident trunk: every unit's relocated weights, built at load.
  std::vector<std::unique_ptr<LayerWeights>> resident_layers_;
  Matrix resident_head_;
  // Streaming ring.
  std::deque<Loaded> ring_;  // in use order (front = oldest)
  int next_unit_ = 0;
  uint64_t ring_tail_ = 0;

  uint8_t* slot_mem_ = nullptr;
  uint64_t slot_mem_bytes_ = 0;
  std::vector<Slot> slots_;
  std::unordered_map<int64_t, int> slot_of_;
  std::unordered_map<int64_t, Plan> expert_plans_;
  uint64_t tick_ = 0;
  uint64_t bytes_read_base_ = 0;
  int max_held_ = 1;
  bool predict_enabled_ = false;  // K3_PREDICT_EXPERTS=1 (the constructor)
  std::mutex forward_mu_;
};

}  // namespace k3
