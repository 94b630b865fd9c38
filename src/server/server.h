// `k3 serve`: the OpenAI-compatible HTTP server (docs/api.md).  run_server() binds the socket,
// starts loading the model on a background thread (/health answers 503 until the engine loop
// runs), serves until SIGINT/SIGTERM, then cancels outstanding requests and returns.
//
// Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models[/{id}], GET /health,
// GET /metrics, POST /tokenize, POST /detokenize, and the chat page at / (web/, embedded at build
// time).  With an API key, /v1/*, /tokenize and /detokenize need `Authorization: Bearer KEY`.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "server/engine_host.h"
#include "server/prompt_builder.h"

namespace k3::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 = any free port (printed)
  std::string api_key;
  EngineOptions engine;
  ImageLimits images;
  size_t max_body_bytes = 32u << 20;
  int http_threads = 0;  // 0 = max_batch + max_queue + 16
};

// Serves until a signal (or a model that fails to load: k3::Error).  `on_listening(port)` is
// called once the socket is bound.
int run_server(const ServerOptions& options, const std::function<void(int port)>& on_listening = {});

}  // namespace k3::server
