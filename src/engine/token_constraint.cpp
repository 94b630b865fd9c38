#include "engine/token_constraint.h"

#include <cstddef>
#include <limits>

namespace k3 {

void keep_only(float* logits, int64_t vocab, const std::vector<int32_t>& ids) {
  thread_local std::vector<uint8_t> allow;  // scratch: called for every generated token
  allow.assign(static_cast<size_t>(vocab), 0);
  for (int32_t t : ids)
    if (t >= 0 && t < vocab) allow[static_cast<size_t>(t)] = 1;
  for (int64_t t = 0; t < vocab; ++t)
    if (!allow[static_cast<size_t>(t)]) logits[t] = -std::numeric_limits<float>::infinity();
}

void forbid(float* logits, int64_t vocab, const std::vector<int32_t>& ids) {
  for (int32_t t : ids)
    if (t >= 0 && t < vocab) logits[t] = -std::numeric_limits<float>::infinity();
}

}  // namespace k3
