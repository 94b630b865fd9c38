#include "model/k3_model.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <cstdio>
#include <mutex>
#include <string>

#include "base/error.h"
#include "base/profile.h"
#include "dist/world.h"
#include "io/available_memory.h"
#include "kernels/attn_res.h"
#include "kernels/linear.h"
#include "kernels/norm.h"
#include "model/ffn.h"
#include "model/partition.h"
#include "model/state_mirror.h"

namespace k3 {

namespace {

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return buf;
}

struct BudgetSplit {
  uint64_t total = 0;    // the memory budget (0: none)
  uint64_t weights = 0;  // the weights' part, or the weight budget alone (0: none)
};

// The options' budgets, else the process-wide ones; with a memory budget, the weights get what
// the sequence-state reserve leaves.
BudgetSplit split_budget(const ModelOptions& o) {
  BudgetSplit b;
  b.total = o.memory_budget ? o.memory_budget : default_memory_budget();
  b.weights = o.weight_budget ? o.weight_budget : default_weight_budget();
  if (b.total == 0) return b;
  if (b.weights == 0) {
    const uint64_t reserve = o.state_reserve ? o.state_reserve : b.total / 8;
    K3_CHECK(reserve < b.total, "the memory budget of ", gib(b.total), " is all taken by the ", gib(reserve),
             " of sequence state asked for; nothing is left for the weights");
    b.weights = b.total - reserve;
  } else {
    K3_CHECK(b.weights < b.total, "the weight budget of ", gib(b.weights), " leaves nothing of the memory budget of ",
             gib(b.total), " for sequence state");
  }
  return b;
}

// FNV-1a over what must agree between the ranks of a multi-process run: config.json and every
// tensor's name, dtype, shape, size, shard and offset (the shard headers).
uint64_t checkpoint_fingerprint(const std::string& dir, const Checkpoint& ckpt) {
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  auto mix_str = [&](const std::string& s) { mix(s.data(), s.size() + 1); };
  std::ifstream config(dir + "/config.json", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(config)), std::istreambuf_iterator<char>());
  mix_str(text);
  for (const auto& [name, t] : ckpt.tensors()) {
    mix_str(name);
    const auto dtype = static_cast<int>(t->dtype);
    mix(&dtype, sizeof dtype);
    for (int64_t d : t->shape) mix(&d, sizeof d);
    mix(&t->nbytes, sizeof t->nbytes);
    mix(&t->offset, sizeof t->offset);
    const std::string& file = *t->file;
    mix_str(file.substr(file.find_last_of('/') + 1));
  }
  return h;
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& dir, const ModelOptions& options) {
  ModelConfig config = load_model_config(dir);
  // A weight budget means streaming, whatever --weights says (except a header-only look).  A
  // memory budget alone keeps --weights as given; auto then reads the weights into memory when
  // they fit in the budget's share for weights, else streams them within it.
  Residency residency = options.residency.value_or(default_residency());
  const BudgetSplit split = split_budget(options);
  const bool weight_budget = options.weight_budget > 0 || default_weight_budget() > 0;
  if (weight_budget && (!options.residency || *options.residency == Residency::kStreamed))
    residency = Residency::kStreamed;
  // Over several ranks, weights that would be read into memory are mapped instead and each rank
  // reads only its own rows (model/partition.h); streamed weights stay whole on every rank.
  const int ranks = options.headers_only ? 1 : dist::size();
  const bool own_rows = ranks > 1 && residency != Residency::kStreamed && residency != Residency::kMapped;
  if (options.headers_only || own_rows) residency = Residency::kMapped;
  auto ckpt = std::make_unique<Checkpoint>(dir, residency, split.weights);
  if (ranks > 1) dist::check_same(checkpoint_fingerprint(dir, *ckpt), "checkpoint (config.json or shard headers)");
  ModelWeights weights = bind_weights(*ckpt, config, options.bind);
  apply_layout(weights, options.layout.value_or(dist::default_layout()), ranks,
               options.expert_replicas.value_or(dist::default_expert_replicas()));
  if (own_rows) read_own_rows(weights, dist::rank(), ranks);
  return std::unique_ptr<Model>(new Model(std::move(config), std::move(ckpt), std::move(weights), options));
}

Model::Model(ModelConfig config, std::unique_ptr<Checkpoint> ckpt, ModelWeights weights, ModelOptions options)
    : config_(std::move(config)), checkpoint_(std::move(ckpt)), weights_(std::move(weights)), options_(options) {
  const BudgetSplit split = split_budget(options_);
  switch (checkpoint_->residency()) {
    case Residency::kStreamed: {
      uint64_t budget = split.weights;
      if (budget == 0) {
        const uint64_t avail = available_memory_bytes();
        K3_CHECK(avail > 0, checkpoint_->dir(),
                 ": the memory available is unknown here, so streamed weights need --weight-budget");
        budget = avail / 4 * 3;
      }
      store_ = std::make_unique<WeightStore>(*checkpoint_, weights_, config_.text, budget, options_.io_threads);
      break;
    }
    case Residency::kMapped: mapped_ = std::make_unique<MappedExperts>(weights_); break;
    default: break;  // kMemory: every scale was checked by bind_weights
  }
  if (split.total > 0) {
    // What the weights hold of the budget: the store's placement, the whole checkpoint read into
    // memory, or (mapped: the page cache's, not k3's) their part.
    uint64_t held = split.weights;
    if (store_) {
      held = store_->stats().held_bytes();
    } else if (checkpoint_->residency() == Residency::kMemory) {
      held = checkpoint_->total_bytes();
    }
    K3_CHECK(held < split.total, checkpoint_->dir(), ": the weights take ", gib(held), " of the memory budget of ",
             gib(split.total), ", leaving nothing for sequence state; stream them (--weights stream) or raise the budget");
    state_budget_ = split.total - held;
  }
}

void Model::check_context(int64_t tokens) const {
  const int64_t limit = config_.text.max_position_embeddings;
  K3_CHECK(tokens <= limit, "a context of ", tokens, " tokens exceeds this model's maximum of ", limit,
           " (max_position_embeddings)");
}

SequenceState Model::new_sequence(int64_t max_tokens) const {
  const int64_t limit = config_.text.max_position_embeddings;
  return SequenceState(config_.text, max_tokens <= 0 ? limit : std::min(max_tokens, limit), kv_cache_dtype());
}

namespace {

// The depth-attention residual stream of one forward call (Block AttnRes), or a plain residual
// stream when the config has no attn_res_block_size.
class ResidualStream {
 public:
  ResidualStream(const TextConfig& c, int64_t rows, std::vector<float> embedding)
      : c_(c), rows_(rows), prefix_(std::move(embedding)) {}

  // Input of layer l's attention sublayer (before input_layernorm); banks at block boundaries.
  void attn_input(int layer, const LayerWeights& w, std::vector<float>* out) {
    if (!c_.attn_res_block_size) {
      *out = prefix_;
      return;
    }
    mix(w.attn_res_query, out);
    boundary_ = layer % *c_.attn_res_block_size == 0;
    if (boundary_) bank_.push_back(std::move(prefix_));
  }
  void add_attn(const std::vector<float>& a) {
    if (c_.attn_res_block_size && boundary_) {
      prefix_ = a;
      return;
    }
    for (size_t i = 0; i < a.size(); ++i) prefix_[i] += a[i];
  }
  void mlp_input(const LayerWeights& w, std::vector<float>* out) {
    if (!c_.attn_res_block_size) {
      *out = prefix_;
      return;
    }
    mix(w.mlp_res_query, out);
  }
  void add_mlp(const std::vector<float>& m) {
    for (size_t i = 0; i < m.size(); ++i) prefix_[i] += m[i];
  }
  void final_output(const ModelWeights& w, std::vector<float>* out) {
    if (!c_.attn_res_block_size) {
      *out = prefix_;
      return;
    }
    mix(w.out_res_query, out);
  }

 private:
  void mix(const std::vector<float>& query, std::vector<float>* out) {
    const int64_t d = c_.hidden_size;
    out->resize(rows_ * d);
    std::vector<const float*> src(bank_.size() + 1);
    for (int64_t r = 0; r < rows_; ++r) {
      for (size_t j = 0; j < bank_.size(); ++j) src[j] = bank_[j].data() + r * d;
      src[bank_.size()] = prefix_.data() + r * d;
      attn_res_mix(src.data(), static_cast<int>(src.size()), d, query.data(), c_.rms_norm_eps, out->data() + r * d);
    }
  }

  const TextConfig& c_;
  int64_t rows_;
  std::vector<float> prefix_;
  std::vector<std::vector<float>> bank_;
  bool boundary_ = false;
};

}  // namespace

void Model::forward(std::span<const SequenceInput> batch, std::vector<float>* logits, ForwardTrace* trace) const {
  const TextConfig& c = config_.text;
  const int64_t d = c.hidden_size;

  // Validate the whole call before touching any state.
  BatchLayout layout;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceInput& in = batch[i];
    K3_CHECK(in.state != nullptr, "forward: sequence ", i, " has no state");
    K3_CHECK(!in.tokens.empty(), "forward: sequence ", i, " has no tokens");
    K3_CHECK(in.state->kda.size() == static_cast<size_t>(c.num_kda_layers()) &&
                 in.state->mla.size() == static_cast<size_t>(c.num_mla_layers()),
             "forward: sequence ", i, " state was made for another model");
    for (size_t j = 0; j < i; ++j)
      K3_CHECK(batch[j].state != in.state, "forward: the same sequence appears twice in one batch");
    const int64_t len = static_cast<int64_t>(in.tokens.size());
    const int64_t pos = in.state->position();
    if (pos + len > in.state->max_tokens())
      fail("input of ", len, " tokens does not fit the context: the sequence holds ", pos, " tokens and its limit is ",
           in.state->max_tokens());
    for (int32_t tok : in.tokens)
      K3_CHECK(tok >= 0 && tok < c.vocab_size, "token id ", tok, " is outside the vocabulary [0, ", c.vocab_size, ")");
    for (const EmbeddingOverride& e : in.embeddings)
      K3_CHECK(e.index >= 0 && e.index < len && e.values != nullptr, "forward: embedding override for position ",
               e.index, " is outside the ", len, " new tokens");
    layout.segments.push_back({in.state, layout.rows, len, pos});
    layout.rows += len;
  }
  const int64_t N = layout.rows;
  if (N == 0) return;
  if (mirror::active()) mirror::send_step(batch, d);  // the other ranks run the same step
  const Precision precision = options_.precision;

  std::vector<float> embedding(N * d);
  {
    ScopedPhase phase(Phase::kEmbed);
    int64_t r = 0;
    for (const SequenceInput& in : batch) {
      const int64_t row0 = r;
      for (int32_t tok : in.tokens) portable::dequant_row(weights_.embed, tok, &embedding[r++ * d]);
      for (const EmbeddingOverride& e : in.embeddings)
        std::copy(e.values, e.values + d, &embedding[(row0 + e.index) * d]);
    }
  }
  if (trace != nullptr) {
    trace->attn_out.assign(c.num_layers, {});
    trace->ffn_out.assign(c.num_layers, {});
    trace->routes.assign(c.num_layers, {});
  }

  // Streamed weights: one forward call at a time reads through the store.
  std::unique_lock<std::mutex> store_lock;
  if (store_) store_lock = std::unique_lock<std::mutex>(store_->forward_mutex());
  ExpertSource* experts = store_ ? static_cast<ExpertSource*>(store_.get()) : mapped_.get();

  ResidualStream stream(c, N, std::move(embedding));
  std::vector<float> h, normed(N * d), sub(N * d);
  int kda_index = 0, mla_index = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    struct LayerHold {  // the store's copy of layer l stays readable until the layer is done
      WeightStore* s;
      int l;
      ~LayerHold() {
        if (s) s->release_layer(l);
      }
    };
    const LayerWeights& L = store_ ? store_->acquire_layer(l) : weights_.layers[l];
    LayerHold hold{store_.get(), l};
    {
      ScopedPhase phase(Phase::kAttnRes);
      stream.attn_input(l, L, &h);
    }
    {
      ScopedPhase phase(Phase::kNorm);
      rms_norm(h.data(), N, d, L.input_norm.data(), c.rms_norm_eps, normed.data());
    }
    if (L.kind == LayerKind::kKda) {
      ScopedPhase phase(Phase::kKda);
      kda_layer_forward(L.kda, c, layout, kda_index++, normed.data(), sub.data(), options_.kda, precision);
    } else {
      ScopedPhase phase(Phase::kMla);
      mla_layer_forward(L.mla, c, layout, mla_index++, normed.data(), sub.data(), options_.mla, precision);
    }
    if (trace != nullptr) trace->attn_out[l] = sub;
    stream.add_attn(sub);

    {
      ScopedPhase phase(Phase::kAttnRes);
      stream.mlp_input(L, &h);
    }
    {
      ScopedPhase phase(Phase::kNorm);
      rms_norm(h.data(), N, d, L.post_norm.data(), c.rms_norm_eps, normed.data());
    }
    if (L.moe) {
      // Expert-bound decode: guess the next MoE layer's experts with its router on this layer's
      // input, so their reads run behind this layer's while the next attention computes.
      int guess_layer = -1;
      std::vector<int32_t> guess;
      if (store_ && store_->takes_predictions() && N * c.top_k * 4 <= c.num_experts) {
        int j = l + 1;
        while (j < c.num_layers && !weights_.layers[j].moe) ++j;
        if (const LayerWeights* next = j < c.num_layers ? store_->resident_layer(j) : nullptr) {
          ScopedPhase phase(Phase::kRouter);
          std::vector<float> x(N * d);
          rms_norm(h.data(), N, d, next->post_norm.data(), c.rms_norm_eps, x.data());
          guess = guess_experts(next->moe_w, c, x.data(), N);
          guess_layer = j;
        }
      }
      moe_forward(L.moe_w, c, normed.data(), N, sub.data(), trace != nullptr ? &trace->routes[l] : nullptr, experts,
                  l, guess_layer, guess, precision);
    } else {
      ScopedPhase phase(Phase::kDense);
      mlp_forward(L.dense, c, normed.data(), N, sub.data(), precision);
    }
    if (trace != nullptr) trace->ffn_out[l] = sub;
    stream.add_mlp(sub);
  }
  {
    ScopedPhase phase(Phase::kAttnRes);
    stream.final_output(weights_, &h);
  }
  if (trace != nullptr) trace->final_hidden = h;
  for (const BatchSegment& s : layout.segments) s.state->position_ += s.len;

  // Final norm + lm_head on the requested rows only.
  std::vector<int64_t> rows;
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchSegment& s = layout.segments[i];
    if (batch[i].all_logits)
      for (int64_t r = 0; r < s.len; ++r) rows.push_back(s.row0 + r);
    else
      rows.push_back(s.row0 + s.len - 1);
  }
  ScopedPhase phase(Phase::kLmHead);
  std::vector<float> picked(rows.size() * d);
  for (size_t i = 0; i < rows.size(); ++i)
    rms_norm(&h[rows[i] * d], 1, d, weights_.final_norm.data(), c.rms_norm_eps, &picked[i * d]);
  const size_t base = logits->size();
  logits->resize(base + rows.size() * static_cast<size_t>(c.vocab_size));
  if (store_) {
    const Matrix& head = store_->acquire_head();
    struct HeadHold {
      WeightStore* s;
      ~HeadHold() { s->release_head(); }
    } hold{store_.get()};
    linear(head, picked.data(), static_cast<int64_t>(rows.size()), logits->data() + base, precision);
  } else {
    linear(weights_.lm_head, picked.data(), static_cast<int64_t>(rows.size()), logits->data() + base, precision);
  }
}

}  // namespace k3
