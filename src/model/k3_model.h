// The Kimi K3 text model: config + bound weights + the forward pass (docs/architecture.md, "The
// model k3 computes").  forward() runs new tokens of any number of sequences in one call
// (prefill chunks and decode steps alike) and advances their states; it validates everything
// first, so a rejected call leaves every state untouched.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "kernels/linear.h"
#include "model/batch.h"
#include "model/k3_config.h"
#include "model/kda_layer.h"
#include "model/mla_layer.h"
#include "model/sequence_state.h"
#include "model/weight_store.h"
#include "model/weights.h"

namespace k3 {

// Replaces the embedding of one input token (e.g. an image's <|media_pad|> placeholders are
// overwritten, in order, by the vision projector's rows).  `values` holds hidden_size floats.
struct EmbeddingOverride {
  int64_t index = 0;  // position within SequenceInput::tokens
  const float* values = nullptr;
};

struct SequenceInput {
  SequenceState* state = nullptr;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // logits for every new token, or only for the last one
  std::span<const EmbeddingOverride> embeddings = {};
};

struct ModelOptions {
  KdaOptions kda;
  MlaOptions mla;
  BindOptions bind;
  // Where the weights live (io/mapped_file.h) and, when streamed, the bytes the weight store may
  // use; unset / 0: the process-wide choice (--weights, --weight-budget).  A budget implies
  // kStreamed.
  std::optional<Residency> residency;
  uint64_t weight_budget = 0;
  // One budget for weights and sequence state (unset / 0: --memory-budget).  The weights get it
  // less state_reserve (unless weight_budget says otherwise), streamed within that part; the
  // sequences get the rest (state_budget(): the server admits requests within it).
  // state_reserve 0: an eighth of the budget.
  uint64_t memory_budget = 0;
  uint64_t state_reserve = 0;
  int io_threads = 0;  // the weight store's readers (0: its default)
  // Headers only: the checkpoint is mapped, nothing but small tensors is read and no weight
  // store is set up (k3 inspect).  The model can still run, from the page cache.
  bool headers_only = false;
  // kF32: exact fp32 math (default).  kBf16: products with bf16 weights round their
  // activations to bf16 and use AVX512-BF16 dot products (kernels/linear.h); kBf16All: the
  // MXFP4 experts' products too.  Faster prefill; tests/model/precision_test.cpp reports each
  // one's logit error and KL divergence against the exact path on the fixture.
  Precision precision = Precision::kF32;
  // The MLA latent cache of new sequences; unset: the process-wide choice (--kv-cache-dtype).
  // kBf16 halves the bytes per token of context; tests/model/precision_test.cpp reports its
  // logit error against the exact kF32 cache.
  std::optional<CacheDtype> kv_cache;
  // Over several ranks, where the routed experts live (dist/expert_plan.h) and, in the
  // throughput layout, how many extra copies of each; unset: --layout, --expert-replicas.
  std::optional<dist::Layout> layout;
  std::optional<int> expert_replicas;
};

class Model {
 public:
  // Opens, validates and binds DIR (config.json + safetensors).  Throws k3::Error.
  static std::unique_ptr<Model> load(const std::string& dir, const ModelOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const TextConfig& text() const { return config_.text; }
  const ModelWeights& weights() const { return weights_; }
  ModelOptions& options() { return options_; }
  const ModelOptions& options() const { return options_; }
  // Where the checkpoint's bytes live (io/mapped_file.h): kMemory, kMapped or kStreamed.
  Residency weights_residency() const { return checkpoint_->residency(); }
  const Checkpoint& checkpoint() const { return *checkpoint_; }
  // The weight store when weights are streamed (kStreamed), else nullptr.
  WeightStore* weight_store() const { return store_.get(); }
  // Bytes of sequence state (KDA states, MLA caches) the memory budget leaves beside the weights;
  // 0 when no memory budget was given (unlimited).
  uint64_t state_budget() const { return state_budget_; }

  // A fresh sequence that may hold up to max_tokens (0 = max_position_embeddings; more is capped).
  SequenceState new_sequence(int64_t max_tokens = 0) const;
  // The latent cache dtype of new_sequence(): options().kv_cache, else the process-wide choice.
  CacheDtype kv_cache_dtype() const { return options_.kv_cache.value_or(default_cache_dtype()); }
  // Throws k3::Error when a context asked for by the user (--ctx) exceeds max_position_embeddings,
  // instead of the silent cap of new_sequence(); 0 (the model's own) passes.
  void check_context(int64_t tokens) const;

  // Appends logits rows (vocab floats each) to *logits in input order: all new tokens of
  // sequences with all_logits, else their last token.  trace: optional intermediates.
  void forward(std::span<const SequenceInput> batch, std::vector<float>* logits, ForwardTrace* trace = nullptr) const;

 private:
  Model(ModelConfig config, std::unique_ptr<Checkpoint> ckpt, ModelWeights weights, ModelOptions options);

  ModelConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;
  ModelWeights weights_;
  ModelOptions options_;
  std::unique_ptr<WeightStore> store_;      // kStreamed
  uint64_t state_budget_ = 0;
  std::unique_ptr<MappedExperts> mapped_;   // kMapped: experts checked on first use
};

}  // namespace k3
