// The HTTP API's request handling up to the point where a generation would start
// (server/http_server.cpp, HttpServer::generate): the body is parsed and bounded by
// parse_request_body (an empty body, nesting past kMaxJsonDepth and non-objects are 400s), then, with a loaded
// engine, the same calls as generate(): check_model_field, parse_generation_params, and
// prepare_chat (messages validated, images decoded, the XTML prompt rendered and tokenized, tool
// schemas compiled) or prepare_completion, and the response_format / tool_choice conflict check.
// Only the GenerationJob (which queues the request on the scheduler) is left out.  Keep the
// sequence in step with generate().
// The engine is the tiny synthetic K3 with its vision tower (`k3 synth --preset tiny`), written
// to the scratch directory at start-up; images are limited to 64 x 64 pixels so that one input
// never spends long in the tower.
// The input is a /v1/chat/completions body, or a /v1/completions body after a first line
// "/v1/completions".
// Properties: everything a request can get wrong is a k3::Error (an ApiError, or a plain Error
// that the server answers with 400), never a 500 and never another exception; an accepted
// request has a prompt within the context, of ids in the vocabulary, with one embedding row
// block per image pad, and sampling fields within their documented ranges.
#include <memory>
#include <string>

#include "base/error.h"
#include "fuzz_support.h"
#include "server/api_error.h"
#include "server/engine_host.h"
#include "server/generation_params.h"
#include "server/prompt_builder.h"
#include "synth/synth_checkpoint.h"
#include "text/py_json.h"

using namespace k3;
using namespace k3::server;

namespace {

constexpr std::string_view kCompletionsLine = "/v1/completions\n";
constexpr const char* kServedName = "k3-fuzz";

EngineHost& host() {
  static EngineHost* const loaded = [] {
    const std::string dir = fuzz::scratch_dir() + "/tiny";
    SynthOptions o;
    o.vision = "tiny";
    write_synth_checkpoint(dir, o);
    EngineOptions options;
    options.model_dir = dir;
    options.served_name = kServedName;
    // Never destroyed: the engine loop thread stays until the process exits.
    auto* h = new EngineHost(options);
    h->load();
    return h;
  }();
  return *loaded;
}

void check_accepted(const GenerationParams& params, const PreparedPrompt& prompt) {
  const EngineHost& h = host();
  K3_FUZZ_ASSERT(!prompt.tokens.empty() && static_cast<int64_t>(prompt.tokens.size()) < h.context_tokens(),
                 "accepted a prompt of ", prompt.tokens.size(), " tokens (context ", h.context_tokens(), ")");
  for (int32_t id : prompt.tokens)
    K3_FUZZ_ASSERT(id >= 0 && id < h.model().text().vocab_size, "the prompt has token id ", id);
  const size_t hidden = static_cast<size_t>(h.model().text().hidden_size);
  K3_FUZZ_ASSERT(prompt.media_positions.size() * hidden == prompt.media_rows.size(), prompt.media_positions.size(),
                 " image pads for ", prompt.media_rows.size(), " embedding values");
  for (int64_t p : prompt.media_positions)
    K3_FUZZ_ASSERT(p >= 0 && p < static_cast<int64_t>(prompt.tokens.size()), "an image pad at position ", p);
  K3_FUZZ_ASSERT(params.n >= 1 && params.n <= kMaxChoices, "n = ", params.n);
  K3_FUZZ_ASSERT(params.max_tokens >= 0, "max_tokens = ", params.max_tokens);
  K3_FUZZ_ASSERT(params.top_logprobs >= -1 && params.top_logprobs <= 20, "top_logprobs = ", params.top_logprobs);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::quiet_logs();
  host();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = fuzz::as_text(data, size);
  Endpoint endpoint = Endpoint::kChat;
  if (text.substr(0, kCompletionsLine.size()) == kCompletionsLine) {
    endpoint = Endpoint::kCompletion;
    text.remove_prefix(kCompletionsLine.size());
  }
  ImageLimits limits;
  limits.max_pixels = 64 * 64;
  try {
    const ojson body = parse_request_body(text);
    check_model_field(body, kServedName);
    GenerationParams params = parse_generation_params(body, endpoint);
    PreparedPrompt prompt;
    if (endpoint == Endpoint::kChat) {
      PreparedChat c = prepare_chat(host(), body, limits);
      prompt = std::move(c.prompt);
      if (!c.forced_tools.empty() && (params.json_object || params.json_schema))
        throw ApiError(400, "response_format json_object / json_schema cannot be combined with tool_choice", "");
    } else {
      prompt = prepare_completion(host(), body);
    }
    check_accepted(params, prompt);
  } catch (const ApiError& e) {
    K3_FUZZ_ASSERT(e.status >= 400 && e.status < 500, "status ", e.status, ": ", e.what());
  } catch (const Error&) {
  }
  return 0;
}
