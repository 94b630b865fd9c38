// k3 serve: the OpenAI-compatible HTTP server with continuous batching and a chat page at /
// (src/server/server.h).  Prints "k3 serve: listening on http://HOST:PORT" once the socket is
// bound; the model then loads in the background (/health: 503 until ready).
#include <cstdio>

#include "base/error.h"
#include "base/thread_pool.h"
#include "cli/commands.h"
#include "server/server.h"

namespace k3::cli {

void add_serve_command(CLI::App& app, Runner& run) {
  struct Args {
    std::string model, served_name;
    server::ServerOptions o;
    int64_t ctx = 0;
    double max_body_mb = 32;
    double max_image_mb = 16;
    double prefix_cache_mb = 1024;
    int threads = 0;
  };
  auto a = std::make_shared<Args>();
  a->o.engine.scheduler.max_batch = 16;
  a->o.engine.scheduler.max_queue = 64;
  CLI::App* sub = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API, with a chat page at /");
  sub->add_option("--model", a->model, "Checkpoint directory (default: the built-in tiny model)")
      ->check(kNonEmpty);
  sub->add_option("--served-model-name", a->served_name, "The model id clients send (default: the directory's name)");
  sub->add_option("--host", a->o.host, "Address to bind (default 127.0.0.1: this machine only)")
      ->capture_default_str();
  sub->add_option("--port", a->o.port, "TCP port (0: any free port)")->check(CLI::Range(0, 65535))
      ->capture_default_str();
  sub->add_option("--api-key", a->o.api_key, "Require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize");
  sub->add_option("--max-batch", a->o.engine.scheduler.max_batch, "Sequences decoded together (slots)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  // Each slot and each waiting request holds one of the server's HTTP threads.
  sub->add_option("--max-queue", a->o.engine.scheduler.max_queue, "Requests that may wait for a slot (beyond: 429)")
      ->check(CLI::Range(size_t{0}, size_t{4096}))
      ->capture_default_str();
  sub->add_option("--ctx", a->ctx, "Context per request, prompt + output (default: the model's)")
      ->check(kNonNegative);
  sub->add_option("--memory-budget", a->o.engine.scheduler.memory_budget,
                  "Bytes of sequence state + MLA cache over all slots (0: unlimited); requests wait for room")
      ->check(kUnsigned64);
  sub->add_option("--prefix-cache-mb", a->prefix_cache_mb,
                  "MiB of prompt-prefix states kept for later requests (0: no cache); beyond --memory-budget")
      ->check(kMebibytesNonNegative)
      ->capture_default_str();
  sub->add_option("--prefill-chunk", a->o.engine.scheduler.prefill_chunk, "Prompt tokens per sequence per step")
      ->check(kPositive)
      ->capture_default_str();
  sub->add_option("--max-body-mb", a->max_body_mb, "Largest request body in MiB (beyond: 413)")
      ->check(kMebibytesPositive)
      ->capture_default_str();
  sub->add_option("--max-images", a->o.images.max_images, "Images per request")->check(kNonNegative)
      ->capture_default_str();
  sub->add_option("--max-image-mb", a->max_image_mb, "Largest image data: URL in MiB (beyond: 413)")
      ->check(kMebibytesPositive)
      ->capture_default_str();
  sub->add_option("--max-image-pixels", a->o.images.max_pixels, "Largest decoded image, width x height")
      ->check(kPositive)
      ->capture_default_str();
  sub->add_option("--threads", a->threads, "Compute threads (default: one per CPU, or K3_THREADS)")
      ->check(kNonNegative);
  sub->callback([a, &run] {
    run = [a]() {
      if (a->threads > 0) set_num_threads(a->threads);
      server::ServerOptions o = a->o;
      o.engine.model_dir = resolve_model_dir(a->model);
      o.engine.scheduler.max_context = a->ctx;
      o.engine.scheduler.step_prefill_tokens = o.engine.scheduler.prefill_chunk;
      std::string name = a->served_name;
      if (name.empty()) {
        std::string dir = o.engine.model_dir;
        while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
        name = dir.substr(dir.find_last_of('/') + 1);
      }
      o.engine.served_name = name;
      o.max_body_bytes = static_cast<size_t>(a->max_body_mb * 1024 * 1024);
      o.images.max_url_bytes = static_cast<uint64_t>(a->max_image_mb * 1024 * 1024);
      o.engine.scheduler.prefix_cache_bytes = static_cast<uint64_t>(a->prefix_cache_mb * 1024 * 1024);
      return server::run_server(o, [&](int port) {
        std::printf("k3 serve: listening on http://%s:%d (model %s loading)\n", o.host.c_str(), port, name.c_str());
        std::fflush(stdout);
      });
    };
  });
}

}  // namespace k3::cli
