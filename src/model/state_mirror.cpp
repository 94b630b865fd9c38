#include "model/state_mirror.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "dist/world.h"
#include "model/k3_model.h"

namespace k3::mirror {
namespace {

enum class Op : uint8_t { kCreate, kCopy, kAssign, kDestroy, kReset, kAssignContents };
enum class Kind : uint32_t { kStep = 1, kStop = 2 };

struct Record {
  Op op;
  uint64_t a = 0, b = 0;
  int64_t max_tokens = 0;
  int32_t cache = 0;
};

std::atomic<bool> g_active{false};
std::mutex g_mutex;
std::vector<Record> g_log;  // operations since the last step
uint64_t g_next_id = 1;

void log(const Record& r) { g_log.push_back(r); }

// A flat message: little-endian fields appended and read back in the same order.
class Writer {
 public:
  template <class T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  void put_bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  }
  std::vector<uint8_t> bytes;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : b_(b) {}
  template <class T>
  T get() {
    T v;
    take(&v, sizeof(T));
    return v;
  }
  void take(void* out, size_t n) {
    K3_CHECK(at_ + n <= b_.size(), "rank ", dist::rank(), ": a truncated step message from rank 0");
    std::memcpy(out, b_.data() + at_, n);
    at_ += n;
  }

 private:
  const std::vector<uint8_t>& b_;
  size_t at_ = 0;
};

void broadcast_message(std::vector<uint8_t>& bytes) {
  uint64_t n = bytes.size();
  dist::broadcast(&n, sizeof n, 0);
  bytes.resize(n);
  if (n > 0) dist::broadcast(bytes.data(), n, 0);
}

}  // namespace

void enable() {
  if (dist::size() > 1 && dist::rank() == 0) g_active.store(true);
}

bool active() { return g_active.load(std::memory_order_relaxed); }

uint64_t on_create(int64_t max_tokens, CacheDtype cache) {
  if (!active()) return 0;
  std::lock_guard<std::mutex> lock(g_mutex);
  const uint64_t id = g_next_id++;
  log({Op::kCreate, id, 0, max_tokens, static_cast<int32_t>(cache)});
  return id;
}

uint64_t on_copy(uint64_t src) {
  if (!active() || src == 0) return 0;
  std::lock_guard<std::mutex> lock(g_mutex);
  const uint64_t id = g_next_id++;
  log({Op::kCopy, id, src});
  return id;
}

uint64_t on_assign(uint64_t dst, uint64_t src) {
  if (!active()) return dst;
  if (src == 0) {
    on_destroy(dst);
    return 0;
  }
  if (dst == 0) return on_copy(src);
  std::lock_guard<std::mutex> lock(g_mutex);
  log({Op::kAssign, dst, src});
  return dst;
}

void on_destroy(uint64_t id) {
  if (!active() || id == 0) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  log({Op::kDestroy, id});
}

void on_reset(uint64_t id) {
  if (!active() || id == 0) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  log({Op::kReset, id});
}

void on_assign_contents(uint64_t dst, uint64_t src) {
  if (!active() || dst == 0) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  log({Op::kAssignContents, dst, src});
}

void send_step(std::span<const SequenceInput> batch, int64_t hidden) {
  Writer w;
  w.put(Kind::kStep);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    w.put(static_cast<uint64_t>(g_log.size()));
    for (const Record& r : g_log) {
      w.put(r.op);
      w.put(r.a);
      w.put(r.b);
      w.put(r.max_tokens);
      w.put(r.cache);
    }
    g_log.clear();
  }
  w.put(static_cast<uint64_t>(batch.size()));
  for (const SequenceInput& in : batch) {
    K3_CHECK(in.state->mirror_id() != 0, "internal error: a sequence state made before the ranks were linked");
    w.put(in.state->mirror_id());
    w.put(static_cast<uint8_t>(in.all_logits));
    w.put(static_cast<uint64_t>(in.tokens.size()));
    w.put_bytes(in.tokens.data(), in.tokens.size() * sizeof(int32_t));
    w.put(static_cast<uint64_t>(in.embeddings.size()));
    for (const EmbeddingOverride& e : in.embeddings) {
      w.put(e.index);
      w.put_bytes(e.values, static_cast<size_t>(hidden) * sizeof(float));
    }
  }
  broadcast_message(w.bytes);
}

void send_stop() {
  Writer w;
  w.put(Kind::kStop);
  broadcast_message(w.bytes);
}

StopOnExit::~StopOnExit() {
  if (!active()) return;
  g_active.store(false);
  send_stop();
}

void follow(const Model& model) {
  std::unordered_map<uint64_t, SequenceState> states;
  auto state = [&](uint64_t id) -> SequenceState& {
    auto it = states.find(id);
    K3_CHECK(it != states.end(), "rank ", dist::rank(), ": rank 0 used sequence state ", id, " which this rank lacks");
    return it->second;
  };
  const int64_t hidden = model.text().hidden_size;
  std::vector<uint8_t> bytes;
  std::vector<float> logits;
  for (;;) {
    bytes.clear();
    broadcast_message(bytes);
    Reader r(bytes);
    if (r.get<Kind>() == Kind::kStop) return;
    const uint64_t ops = r.get<uint64_t>();
    for (uint64_t i = 0; i < ops; ++i) {
      Record rec;
      rec.op = r.get<Op>();
      rec.a = r.get<uint64_t>();
      rec.b = r.get<uint64_t>();
      rec.max_tokens = r.get<int64_t>();
      rec.cache = r.get<int32_t>();
      switch (rec.op) {
        case Op::kCreate:
          states.insert_or_assign(rec.a, SequenceState(model.text(), rec.max_tokens, static_cast<CacheDtype>(rec.cache)));
          break;
        case Op::kCopy: states.insert_or_assign(rec.a, SequenceState(state(rec.b))); break;
        case Op::kAssign: state(rec.a) = state(rec.b); break;
        case Op::kDestroy: states.erase(rec.a); break;
        case Op::kReset: state(rec.a).reset(); break;
        case Op::kAssignContents: state(rec.a).assign_contents(state(rec.b)); break;
      }
    }
    const uint64_t n = r.get<uint64_t>();
    std::vector<std::vector<int32_t>> tokens(n);
    std::vector<std::vector<EmbeddingOverride>> overrides(n);
    std::vector<std::vector<std::vector<float>>> values(n);
    std::vector<SequenceInput> batch(n);
    for (uint64_t i = 0; i < n; ++i) {
      batch[i].state = &state(r.get<uint64_t>());
      batch[i].all_logits = r.get<uint8_t>() != 0;
      tokens[i].resize(r.get<uint64_t>());
      r.take(tokens[i].data(), tokens[i].size() * sizeof(int32_t));
      const uint64_t m = r.get<uint64_t>();
      values[i].resize(m);
      for (uint64_t k = 0; k < m; ++k) {
        EmbeddingOverride e;
        e.index = r.get<int64_t>();
        values[i][k].resize(static_cast<size_t>(hidden));
        r.take(values[i][k].data(), static_cast<size_t>(hidden) * sizeof(float));
        e.values = values[i][k].data();
        overrides[i].push_back(e);
      }
      batch[i].tokens = tokens[i];
      batch[i].embeddings = overrides[i];
    }
    logits.clear();
    model.forward(batch, &logits);
  }
}

}  // namespace k3::mirror
