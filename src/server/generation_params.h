// The sampling and output fields shared by /v1/chat/completions and /v1/completions, read from
// the request body and checked (docs/api.md, "Sampling and output fields"):
//   max_tokens / max_completion_tokens (the latter wins), temperature [0, 2] (default 1),
//   top_p (0, 1], top_k (0 or -1 = off), min_p [0, 1], presence_penalty / frequency_penalty
//   [-2, 2], repetition_penalty (0, 2], logit_bias ({"token id": [-100, 100]}, at most 1024),
//   seed, stop (string or list, matched on the text), stream, stream_options.include_usage,
//   ignore_eos, user, n [1, 16]; chat logprobs (bool) + top_logprobs [0, 20], completions logprobs
//   [0, 20];
//   completions also return_token_ids, skip_special_tokens.
// Fields k3 does not implement are refused with ApiError 400 naming the field, unless they hold
// their neutral value: best_of other than 1, echo, suffix, and json_schema keywords outside the
// subset of text/json_schema.h (400 "unsupported_schema").  response_format json_object and
// json_schema are constrained decoding (engine/json_constraint.h).  Unknown fields are ignored.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/tool_constraint.h"
#include "text/json_schema.h"
#include "text/py_json.h"

namespace k3::server {

enum class Endpoint { kChat, kCompletion };

struct GenerationParams {
  int64_t max_tokens = 0;  // 0 = until the context is full
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool ignore_eos = false;
  bool return_token_ids = false;     // completions: choices[].token_ids
  bool skip_special_tokens = false;  // completions: drop special tokens from the text
  bool parallel_tool_calls = true;   // false: at most one tool call is returned
  int top_logprobs = -1;             // -1: no logprobs; else the alternatives per token
  int n = 1;                         // choices; choice i samples with seed + i
  bool json_object = false;          // chat: response_format {"type": "json_object"}
  std::shared_ptr<const CompiledSchema> json_schema;  // chat: response_format json_schema
  // Chat, from tool_choice (set by the handler, not parsed here): decoding must call one of these.
  std::vector<ForcedTool> forced_tools;
  bool single_tool_call = false;
};

inline constexpr int kMaxChoices = 16;

GenerationParams parse_generation_params(const ojson& body, Endpoint endpoint);

// The `model` field: absent / null, or `served` (else ApiError 404 "model_not_found", param
// "model", as OpenAI and vLLM answer a model they do not serve).
void check_model_field(const ojson& body, const std::string& served);

// Typed field readers: nullopt when absent or null; ApiError 400 naming the field otherwise.
std::optional<bool> get_bool(const ojson& body, const char* field);
std::optional<int64_t> get_int(const ojson& body, const char* field);
std::optional<double> get_number(const ojson& body, const char* field);
std::optional<std::string> get_string(const ojson& body, const char* field);

}  // namespace k3::server
