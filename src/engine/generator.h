// The single-sequence generation loop: prefill the prompt in chunks, then decode one token
// per step until max_tokens or a stop token.  Prompt tokens may carry embedding overrides (an
// image's <|media_pad|> rows, vision/media_prompt.h); each chunk gets the ones in its range.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/sampler.h"
#include "model/k3_model.h"

namespace k3 {

// Prompt tokens per forward call when one sequence is prefilled alone (generate, logits, bench).
// Each chunk decompresses the MLA latent cache once per head, work that grows with the cache,
// while the chunk's attention grows with the cache times the chunk: at 2048 tokens the
// decompression is about a sixth of the MLA work at any depth (at 256, over half from ~16k
// tokens).  The working memory grows with the chunk (about 0.5 MiB per token at K3's widths,
// `k3 plan`), never with the prompt.  The server steps in smaller chunks (SchedulerOptions):
// its steps also carry other sequences' decode steps.
inline constexpr int64_t kPrefillChunk = 2048;

struct GenerateOptions {
  int max_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one of these
  int64_t prefill_chunk = kPrefillChunk;  // prompt tokens per forward call
  // Overrides of prompt embeddings (index = position in the prompt, ascending); the values must
  // outlive the call.
  std::span<const EmbeddingOverride> prompt_embeddings = {};
  // Sees the logits (vocab floats) every generated token is sampled from, before sampling.
  std::function<void(std::span<const float>)> on_logits;
};

// Calls on_token for each generated token (return false to stop early); returns them all.
std::vector<int32_t> generate(const Model& model, SequenceState& state, const std::vector<int32_t>& prompt,
                              const GenerateOptions& options,
                              const std::function<bool(int32_t)>& on_token = {});

// Runs the prompt through the model in chunks of `chunk` tokens, each chunk with the embedding
// overrides in its range; *logits gets every prompt position's logits (all_logits) or the last's.
void prefill(const Model& model, SequenceState& state, const std::vector<int32_t>& prompt, int64_t chunk,
             std::span<const EmbeddingOverride> embeddings, bool all_logits, std::vector<float>* logits);

// Logits of every prompt position from a prefill in chunks: [prompt.size(), vocab].
std::vector<float> prefill_logits(const Model& model, SequenceState& state, const std::vector<int32_t>& prompt,
                                  int64_t chunk = kPrefillChunk, std::span<const EmbeddingOverride> embeddings = {});

}  // namespace k3
