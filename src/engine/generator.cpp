#include "engine/generator.h"

#include <algorithm>

#include "base/error.h"

namespace k3 {

void prefill(const Model& model, SequenceState& state, const std::vector<int32_t>& prompt, int64_t chunk,
             std::span<const EmbeddingOverride> embeddings, bool all_logits, std::vector<float>* logits) {
  K3_CHECK(!prompt.empty(), "the prompt is empty");
  K3_CHECK(chunk > 0, "prefill chunk must be positive");
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (state.position() + n > state.max_tokens())
    fail("prompt of ", n, " tokens exceeds the context of ", state.max_tokens(), " tokens",
         state.position() > 0 ? cat(" (", state.position(), " already used)") : std::string());
  for (size_t e = 0; e < embeddings.size(); ++e)
    K3_CHECK(embeddings[e].index >= 0 && embeddings[e].index < n && embeddings[e].values != nullptr &&
                 (e == 0 || embeddings[e].index > embeddings[e - 1].index),
             "prompt embedding override ", e, " (position ", embeddings[e].index, ") is invalid or out of order");
  std::vector<EmbeddingOverride> local;
  size_t next = 0;
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t len = std::min(chunk, n - i);
    local.clear();
    for (; next < embeddings.size() && embeddings[next].index < i + len; ++next)
      local.push_back({embeddings[next].index - i, embeddings[next].values});
    SequenceInput in{&state, std::span<const int32_t>(prompt.data() + i, len), all_logits, local};
    if (!all_logits && i + len < n) {
      std::vector<float> discard;
      model.forward(std::span<const SequenceInput>(&in, 1), &discard);
    } else {
      model.forward(std::span<const SequenceInput>(&in, 1), logits);
    }
  }
}

std::vector<float> prefill_logits(const Model& model, SequenceState& state, const std::vector<int32_t>& prompt,
                                  int64_t chunk, std::span<const EmbeddingOverride> embeddings) {
  std::vector<float> logits;
  prefill(model, state, prompt, chunk, embeddings, true, &logits);
  return logits;
}

std::vector<int32_t> generate(const Model& model, SequenceState& state, const std::vector<int32_t>& prompt,
                              const GenerateOptions& options, const std::function<bool(int32_t)>& on_token) {
  K3_CHECK(options.max_tokens >= 0, "max_tokens must be >= 0");
  validate(options.sampling, model.text().vocab_size);
  Sampler sampler(options.sampling, prompt);
  const int64_t vocab = model.text().vocab_size;
  std::vector<float> logits;
  prefill(model, state, prompt, options.prefill_chunk, options.prompt_embeddings, false, &logits);
  std::vector<int32_t> out;
  if (state.position() >= state.max_tokens()) return out;  // a prompt that fills the context: no room
  while (static_cast<int>(out.size()) < options.max_tokens) {
    const float* last = logits.data() + logits.size() - vocab;
    if (options.on_logits) options.on_logits(std::span<const float>(last, static_cast<size_t>(vocab)));
    const int32_t tok = sampler.sample(last, vocab);
    out.push_back(tok);
    if (on_token && !on_token(tok)) break;
    if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), tok) != options.stop_tokens.end()) break;
    if (static_cast<int>(out.size()) == options.max_tokens) break;
    if (state.full_with_sampled_token()) break;
    logits.clear();
    SequenceInput in{&state, std::span<const int32_t>(&out.back(), 1), false};
    model.forward(std::span<const SequenceInput>(&in, 1), &logits);
  }
  return out;
}

}  // namespace k3
