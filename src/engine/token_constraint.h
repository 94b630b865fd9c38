// What a request may say next, token by token (constrained decoding): before each sample the
// scheduler lets the constraint mask the logits, after it tells the constraint which token was
// chosen.  Implementations: ChatJsonConstraint (engine/json_constraint.h).
#pragma once

#include <cstdint>
#include <vector>

namespace k3 {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits (vocab floats) of tokens that may not come next to -infinity; at least one
  // token stays allowed.
  virtual void mask(float* logits, int64_t vocab) = 0;
  // Advances past the sampled token (one the last mask allowed).
  virtual void accept(int32_t token) = 0;
};

// Mask helpers for implementations: every logit but those of `ids` / those of `ids` to -infinity.
void keep_only(float* logits, int64_t vocab, const std::vector<int32_t>& ids);
void forbid(float* logits, int64_t vocab, const std::vector<int32_t>& ids);

}  // namespace k3
