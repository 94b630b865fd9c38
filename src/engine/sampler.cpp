#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "base/error.h"

namespace k3 {

void validate(const SamplingParams& p) {
  K3_CHECK(std::isfinite(p.temperature) && p.temperature >= 0.0f, "temperature must be >= 0 (got ", p.temperature, ")");
  K3_CHECK(p.top_k >= 0, "top_k must be >= 0 (got ", p.top_k, ")");
  K3_CHECK(std::isfinite(p.top_p) && p.top_p > 0.0f && p.top_p <= 1.0f, "top_p must be in (0, 1] (got ", p.top_p, ")");
}

int32_t argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) { validate(params); }

int32_t Sampler::sample(const float* logits, int64_t vocab) {
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
  double u = rng_.uniform() * sum;
  for (int64_t i = 0; i < keep; ++i) {
    u -= p[i];
    if (u < 0.0) return ids[i];
  }
  return ids[keep - 1];
}

}  // namespace k3
