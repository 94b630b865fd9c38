#include "server/generation_params.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>

#include "engine/json_constraint.h"
#include "server/api_error.h"

namespace k3::server {
namespace {

[[noreturn]] void bad(const char* field, const std::string& message) { throw ApiError(400, message, field); }

[[noreturn]] void unsupported(const char* field, const std::string& why) {
  throw ApiError(400, cat(field, " is not supported by k3: ", why), field, "unsupported_field");
}

bool present(const ojson& body, const char* field) { return body.contains(field) && !body[field].is_null(); }

}  // namespace

std::optional<bool> get_bool(const ojson& body, const char* field) {
  if (!present(body, field)) return std::nullopt;
  if (!body[field].is_boolean()) bad(field, cat(field, " must be a boolean"));
  return body[field].get<bool>();
}

std::optional<int64_t> get_int(const ojson& body, const char* field) {
  if (!present(body, field)) return std::nullopt;
  const ojson& v = body[field];
  // (An unsigned value past 2^63 - 1 would wrap: 18446744073709551615 would become -1, and a
  // top_k of that size "no limit".)
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    bad(field, cat(field, " is too large (got ", v.get<uint64_t>(), ")"));
  if (v.is_number_integer()) return v.get<int64_t>();
  // 16.0 is accepted as 16 (JavaScript clients send whole floats), 16.5 is not; the range check
  // comes first, as converting a double beyond int64 is undefined.
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!(std::fabs(d) < 9.2e18)) bad(field, cat(field, " is too large (got ", d, ")"));
    if (d == std::trunc(d)) return static_cast<int64_t>(d);
  }
  bad(field, cat(field, " must be an integer"));
}

std::optional<double> get_number(const ojson& body, const char* field) {
  if (!present(body, field)) return std::nullopt;
  if (!body[field].is_number()) bad(field, cat(field, " must be a number"));
  return body[field].get<double>();
}

std::optional<std::string> get_string(const ojson& body, const char* field) {
  if (!present(body, field)) return std::nullopt;
  if (!body[field].is_string()) bad(field, cat(field, " must be a string"));
  return body[field].get<std::string>();
}

void check_model_field(const ojson& body, const std::string& served) {
  const std::optional<std::string> model = get_string(body, "model");
  if (model && *model != served)
    throw ApiError(404, cat("the model '", *model, "' does not exist; this server serves '", served, "'"), "model",
                   "model_not_found");
}

GenerationParams parse_generation_params(const ojson& body, Endpoint endpoint) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  const bool chat = endpoint == Endpoint::kChat;
  GenerationParams g;
  g.max_tokens = chat ? 0 : 16;  // OpenAI's defaults: chat until done, completions 16
  for (const char* f : {"max_tokens", "max_completion_tokens"}) {
    if (auto v = get_int(body, f)) {
      if (*v < 1) bad(f, cat(f, " must be >= 1 (got ", *v, ")"));
      g.max_tokens = *v;
    }
  }
  // A number field in [lo, hi] (or (lo, hi]), into a float.  An open bound is also checked in
  // float: top_p 1e-50 passed in double, became 0 and was refused by the scheduler under
  // "max_tokens".
  const auto ranged = [&](const char* f, double lo, double hi, bool open_lo, float* out) {
    if (auto v = get_number(body, f)) {
      if (!((open_lo ? *v > lo : *v >= lo) && *v <= hi))
        bad(f, cat(f, " must be in ", open_lo ? "(" : "[", lo, ", ", hi, "] (got ", *v, ")"));
      if (open_lo && static_cast<float>(*v) <= static_cast<float>(lo))
        bad(f, cat(f, " ", *v, " is too small (it is ", lo, " as a 32-bit float)"));
      *out = static_cast<float>(*v);
    }
  };
  g.sampling.temperature = 1.0f;
  ranged("temperature", 0.0, 2.0, false, &g.sampling.temperature);
  ranged("top_p", 0.0, 1.0, true, &g.sampling.top_p);
  if (auto v = get_int(body, "top_k")) {
    if (*v < -1 || *v > (1 << 30)) bad("top_k", cat("top_k must be -1, 0 (no limit) or a positive integer (got ", *v, ")"));
    g.sampling.top_k = *v < 0 ? 0 : static_cast<int>(*v);
  }
  if (auto v = get_int(body, "seed")) {
    g.sampling.seed = static_cast<uint64_t>(*v);
  } else {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    g.sampling.seed = rng();
  }
  if (present(body, "stop")) {
    const ojson& s = body["stop"];
    if (s.is_string()) {
      g.stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      for (const ojson& x : s) {
        if (!x.is_string()) bad("stop", "stop must be a string or a list of strings");
        g.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", "stop must be a string or a list of strings");
    }
    if (g.stop.size() > 16) bad("stop", cat("stop holds ", g.stop.size(), " strings; at most 16 are allowed"));
    for (const std::string& x : g.stop)
      if (x.empty()) bad("stop", "stop strings must not be empty");
  }
  g.stream = get_bool(body, "stream").value_or(false);
  if (present(body, "stream_options")) {
    const ojson& so = body["stream_options"];
    if (!so.is_object()) bad("stream_options", "stream_options must be an object");
    if (!g.stream) bad("stream_options", "stream_options is only allowed when stream is true");
    if (present(so, "include_usage")) {  // (its error named "include_usage", a field the body does not have)
      if (!so["include_usage"].is_boolean())
        bad("stream_options", "stream_options.include_usage must be a boolean");
      g.include_usage = so["include_usage"].get<bool>();
    }
  }
  g.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  g.parallel_tool_calls = get_bool(body, "parallel_tool_calls").value_or(true);
  get_string(body, "user");  // type check only

  // What k3 does not implement: refuse unless neutral.
  if (auto v = get_int(body, "n")) {
    if (*v < 1 || *v > kMaxChoices) bad("n", cat("n must be in [1, ", kMaxChoices, "] (got ", *v, ")"));
    g.n = static_cast<int>(*v);
  }
  if (auto v = get_int(body, "best_of"); v && *v != 1) unsupported("best_of", "use n for several choices");
  if (get_bool(body, "echo").value_or(false)) unsupported("echo", "the prompt is not echoed");
  const auto top_count = [&](const char* f) {
    const int64_t v = *get_int(body, f);
    if (v < 0 || v > kMaxTopLogprobs) bad(f, cat(f, " must be in [0, ", kMaxTopLogprobs, "] (got ", v, ")"));
    return static_cast<int>(v);
  };
  if (chat) {
    const bool lp = get_bool(body, "logprobs").value_or(false);
    if (present(body, "top_logprobs")) {
      const int top = top_count("top_logprobs");
      if (!lp) bad("top_logprobs", "top_logprobs needs logprobs: true");
      g.top_logprobs = top;
    } else if (lp) {
      g.top_logprobs = 0;
    }
    if (present(body, "response_format")) {
      const ojson& rf = body["response_format"];
      if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
        bad("response_format", "response_format must be an object with a string \"type\"");
      const std::string type = rf["type"];
      if (type == "json_object")
        g.json_object = true;
      else if (type == "json_schema") {
        const ojson& js = rf.contains("json_schema") ? rf["json_schema"] : ojson();
        if (!js.is_object() || !js.contains("schema") || !js["schema"].is_object())
          bad("response_format", "response_format json_schema needs json_schema.schema, an object");
        try {
          g.json_schema = compile_decodable_schema(js["schema"]);
        } catch (const Error& e) {
          throw ApiError(400, e.what(), "response_format", "unsupported_schema");
        }
      }
      else if (type != "text")
        bad("response_format", cat("response_format type must be text, json_object or json_schema (got '", type, "')"));
    }
  } else {
    if (present(body, "logprobs")) g.top_logprobs = top_count("logprobs");
    if (present(body, "suffix")) unsupported("suffix", "insertion (suffix) is not supported");
    // Chat-only fields were silently ignored here.
    for (const char* f : {"response_format", "tools", "tool_choice", "messages"})
      if (present(body, f)) unsupported(f, cat(f, " belongs to /v1/chat/completions; /v1/completions takes a prompt"));
    g.return_token_ids = get_bool(body, "return_token_ids").value_or(false);
    g.skip_special_tokens = get_bool(body, "skip_special_tokens").value_or(false);
  }
  if (present(body, "logit_bias")) {  // {"token id": bias}; the ids are checked against the vocabulary later
    const ojson& lb = body["logit_bias"];
    if (!lb.is_object()) bad("logit_bias", "logit_bias must be an object of token id -> bias");
    if (lb.size() > 1024) bad("logit_bias", cat("logit_bias holds ", lb.size(), " tokens; at most 1024 are allowed"));
    for (const auto& [key, value] : lb.items()) {
      // Decimal digits only (strtoll alone would take " +5" as token 5).
      const bool digits = !key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos;
      const long long id = digits ? std::strtoll(key.c_str(), nullptr, 10) : -1;
      if (!digits || id > (1ll << 30))
        bad("logit_bias", cat("logit_bias keys must be token ids (got '", key, "')"));
      if (!value.is_number() || !(std::abs(value.get<double>()) <= 100.0))
        bad("logit_bias", cat("logit_bias values must be numbers in [-100, 100] (token ", key, ")"));
      g.sampling.logit_bias.emplace_back(static_cast<int32_t>(id), value.get<float>());
    }
  }
  ranged("presence_penalty", -2.0, 2.0, false, &g.sampling.presence_penalty);
  ranged("frequency_penalty", -2.0, 2.0, false, &g.sampling.frequency_penalty);
  ranged("repetition_penalty", 0.0, 2.0, true, &g.sampling.repetition_penalty);
  ranged("min_p", 0.0, 1.0, false, &g.sampling.min_p);
  return g;
}

}  // namespace k3::server
