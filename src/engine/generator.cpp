#include "engine/generator.h"

#include <algorithm>

#include "base/error.h"

namespace k3 {
namespace {

// Runs the prompt through the model in chunks, keeping the logits the caller wants.
void prefill(const Model& model, SequenceState& state, const std::vector<int32_t>& prompt, int64_t chunk,
             bool all_logits, std::vector<float>* logits) {
  K3_CHECK(!prompt.empty(), "the prompt is empty");
  K3_CHECK(chunk > 0, "prefill chunk must be positive");
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (state.position() + n > state.max_tokens())
    fail("prompt of ", n, " tokens exceeds the context of ", state.max_tokens(), " tokens",
         state.position() > 0 ? cat(" (", state.position(), " already used)") : std::string());
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t len = std::min(chunk, n - i);
    SequenceInput in{&state, std::span<const int32_t>(prompt.data() + i, len), all_logits};
    if (!all_logits && i + len < n) {
      std::vector<float> discard;
      model.forward(std::span<const SequenceInput>(&in, 1), &discard);
    } else {
      model.forward(std::span<const SequenceInput>(&in, 1), logits);
    }
  }
}

}  // namespace

std::vector<float> prefill_logits(const Model& model, SequenceState& state, const std::vector<int32_t>& prompt,
                                  int64_t chunk) {
  std::vector<float> logits;
  prefill(model, state, prompt, chunk, true, &logits);
  return logits;
}

std::vector<int32_t> generate(const Model& model, SequenceState& state, const std::vector<int32_t>& prompt,
                              const GenerateOptions& options, const std::function<bool(int32_t)>& on_token) {
  K3_CHECK(options.max_tokens >= 0, "max_tokens must be >= 0");
  Sampler sampler(options.sampling);
  const int64_t vocab = model.text().vocab_size;
  std::vector<float> logits;
  prefill(model, state, prompt, options.prefill_chunk, false, &logits);
  std::vector<int32_t> out;
  while (static_cast<int>(out.size()) < options.max_tokens) {
    const int32_t tok = sampler.sample(logits.data() + logits.size() - vocab, vocab);
    out.push_back(tok);
    if (on_token && !on_token(tok)) break;
    if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), tok) != options.stop_tokens.end()) break;
    if (static_cast<int>(out.size()) == options.max_tokens) break;
    if (state.position() >= state.max_tokens()) break;  // context full
    logits.clear();
    SequenceInput in{&state, std::span<const int32_t>(&out.back(), 1), false};
    model.forward(std::span<const SequenceInput>(&in, 1), &logits);
  }
  return out;
}

}  // namespace k3
