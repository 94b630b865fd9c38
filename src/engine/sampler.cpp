#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "base/error.h"

namespace k3 {

void validate(const SamplingParams& p, int64_t vocab) {
  K3_CHECK(std::isfinite(p.temperature) && p.temperature >= 0.0f, "temperature must be finite and >= 0 (got ",
           p.temperature, ")");
  K3_CHECK(p.top_k >= 0, "top_k must be >= 0 (got ", p.top_k, ")");
  K3_CHECK(std::isfinite(p.top_p) && p.top_p > 0.0f && p.top_p <= 1.0f, "top_p must be in (0, 1] (got ", p.top_p, ")");
  K3_CHECK(std::isfinite(p.min_p) && p.min_p >= 0.0f && p.min_p <= 1.0f, "min_p must be in [0, 1] (got ", p.min_p, ")");
  K3_CHECK(std::isfinite(p.presence_penalty) && std::abs(p.presence_penalty) <= 2.0f,
           "presence_penalty must be in [-2, 2] (got ", p.presence_penalty, ")");
  K3_CHECK(std::isfinite(p.frequency_penalty) && std::abs(p.frequency_penalty) <= 2.0f,
           "frequency_penalty must be in [-2, 2] (got ", p.frequency_penalty, ")");
  K3_CHECK(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.0f && p.repetition_penalty <= 2.0f,
           "repetition_penalty must be in (0, 2] (got ", p.repetition_penalty, ")");
  for (const auto& [tok, bias] : p.logit_bias) {
    K3_CHECK(std::isfinite(bias) && std::abs(bias) <= 100.0f, "logit_bias for token ", tok,
             " must be in [-100, 100] (got ", bias, ")");
    K3_CHECK(tok >= 0 && (vocab <= 0 || tok < vocab), "logit_bias names token ", tok, ", outside the vocabulary [0, ",
             vocab, ")");
  }
}

int32_t argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplingParams& params, std::span<const int32_t> prompt) : params_(params), rng_(params.seed) {
  validate(params);
  if (params.repetition_penalty != 1.0f) prompt_tokens_.insert(prompt.begin(), prompt.end());
}

bool Sampler::adjusts() const {
  return !params_.logit_bias.empty() || params_.repetition_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
         params_.presence_penalty != 0.0f;
}

const float* Sampler::adjusted(const float* logits, int64_t vocab) {
  work_.assign(logits, logits + vocab);
  for (const auto& [tok, bias] : params_.logit_bias)
    if (tok < vocab) work_[tok] += bias;
  const float r = params_.repetition_penalty;
  const auto repeat = [&](int32_t t) {
    // A tiny r (1e-38) made l / r infinite, and the softmax NaN: the least likely token was picked.
    if (t >= 0 && t < vocab)
      work_[t] = work_[t] > 0.0f ? std::min(work_[t] / r, std::numeric_limits<float>::max()) : work_[t] * r;
  };
  if (r != 1.0f) {
    for (int32_t t : prompt_tokens_) repeat(t);
    for (const auto& [t, n] : output_counts_)
      if (!prompt_tokens_.count(t)) repeat(t);
  }
  for (const auto& [t, n] : output_counts_)
    if (t >= 0 && t < vocab) work_[t] -= params_.frequency_penalty * static_cast<float>(n) + params_.presence_penalty;
  return work_.data();
}

int32_t Sampler::sample(const float* raw, int64_t vocab) {
  const bool adjust = adjusts();
  const float* logits = adjust ? adjusted(raw, vocab) : raw;
  const int32_t tok = pick(logits, vocab);
  if (adjust) ++output_counts_[tok];
  return tok;
}

int32_t Sampler::pick(const float* logits, int64_t vocab) {
  if (params_.temperature == 0.0f) return argmax(logits, vocab);
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  int64_t keep = vocab;
  if (params_.top_k > 0 && params_.top_k < vocab) keep = params_.top_k;
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  ids.resize(keep);
  const double inv_t = 1.0 / params_.temperature;
  const double mx = logits[ids[0]];
  std::vector<double> p(keep);
  double sum = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    p[i] = std::exp((logits[ids[i]] - mx) * inv_t);
    sum += p[i];
  }
  if (params_.top_p < 1.0f) {
    double cum = 0.0;
    int64_t cut = keep;
    for (int64_t i = 0; i < keep; ++i) {
      cum += p[i] / sum;
      if (cum >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    sum = std::accumulate(p.begin(), p.begin() + keep, 0.0);
  }
  if (params_.min_p > 0.0f) {  // p is in decreasing order and p[0] is the top token's weight
    const double floor = params_.min_p * p[0];
    while (keep > 1 && p[keep - 1] < floor) --keep;
    sum = std::accumulate(p.begin(), p.begin() + keep, 0.0);
  }
  double u = rng_.uniform() * sum;
  for (int64_t i = 0; i < keep; ++i) {
    u -= p[i];
    if (u < 0.0) return ids[i];
  }
  return ids[keep - 1];
}

}  // namespace k3
