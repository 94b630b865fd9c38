// k3 serve: the OpenAI-compatible HTTP server with continuous batching and a chat page at /
// (src/server/server.h).  The checkpoint is first validated from its headers (config, every
// tensor's name, shape and dtype, the tokenizer, the vision tower), so a model that cannot load
// fails before anything listens.  Prints "k3 serve: listening on http://HOST:PORT" once the
// socket is bound; the weights then load in the background (/health: 503 until ready), and one
// line on stderr says when the model is ready.
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "base/thread_pool.h"
#include "cli/commands.h"
#include "dist/expert_plan.h"
#include "engine/generator.h"
#include "engine/multimodal.h"
#include "io/mapped_file.h"
#include "model/k3_model.h"
#include "model/state_mirror.h"
#include "server/server.h"
#include "text/tokenizer.h"

namespace k3::cli {
namespace {

// What the server's loader will do, from headers and small tensors only (as `k3 inspect`): a
// missing or malformed checkpoint, a tokenizer that does not match it, a bad vision tower or a
// --ctx beyond the model fail here, before the socket is bound.  The message starts as the
// server's own load failure does ("cannot serve DIR: ...").
void check_model_loads(const std::string& dir, int64_t ctx) {
  try {
    ModelOptions options;
    options.headers_only = true;
    auto model = Model::load(dir, options);
    model->check_context(ctx);
    const Tokenizer tokenizer = Tokenizer::from_model_dir(dir);
    check_tokenizer_against_config(tokenizer, model->config());
    if (model->config().has_vision) {
      (void)load_vision_for(*model, dir);
      K3_CHECK(model->config().media_placeholder_token_id >= 0,
               "config.json has a vision tower but no media_placeholder_token_id");
    }
  } catch (const Error& e) {
    fail("cannot serve ", dir, ": ", e.what());
  }
}

// Says once on stderr when the model has loaded: polls the server's own /health (the server
// loads in the background and has no other signal to the command) until it answers 200, the
// server stops, or the watcher is destroyed.
class ReadyWatcher {
 public:
  ReadyWatcher() = default;
  ReadyWatcher(const ReadyWatcher&) = delete;
  ReadyWatcher& operator=(const ReadyWatcher&) = delete;
  ~ReadyWatcher() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  void start(const std::string& host, int port, const std::string& name) {
    // A wildcard address listens on loopback too.
    const std::string connect = host.empty() || host == "0.0.0.0" ? "127.0.0.1" : host == "::" ? "::1" : host;
    thread_ = std::thread([this, connect, port, name] {
      const auto t0 = std::chrono::steady_clock::now();
      httplib::Client client(connect, port);
      client.set_connection_timeout(1);
      client.set_read_timeout(5);
      while (!stop_) {
        const auto r = client.Get("/health");
        if (r && r->status == 200) {
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (log_level() >= LogLevel::kWarn) {
            std::fprintf(stderr, "k3 serve: model %s ready (loaded in %.1f s)\n", name.c_str(), s);
            std::fflush(stderr);
          }
          return;
        }
        for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

void add_serve_command(CLI::App& app, Runner& run) {
  struct Args {
    std::string model, served_name, state_budget;
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
  a->o.engine.scheduler.prefill_chunk_max = kPrefillChunk;  // as k3 generate's chunks
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
  sub->add_option("--state-budget", a->state_budget,
                  "Memory for sequence state + MLA cache over all slots, e.g. 8G or 10% (default: what k3's "
                  "--memory-budget leaves after the weights; unlimited without one); requests wait for room");
  sub->add_option("--prefix-cache-mb", a->prefix_cache_mb,
                  "MiB of prompt-prefix states kept for later requests (0: no cache); beyond --state-budget")
      ->check(kMebibytesNonNegative)
      ->capture_default_str();
  sub->add_option("--prefill-chunk", a->o.engine.scheduler.prefill_chunk,
                  "Prompt tokens per sequence per step, and the grid of the prefix cache's states; each step holds up "
                  "the other sequences' decode")
      ->check(kPositive)
      ->capture_default_str();
  sub->add_option("--prefill-chunk-max", a->o.engine.scheduler.prefill_chunk_max,
                  "Deep in a long prompt, steps of up to this many of its tokens (at least 1/32 of its depth), so "
                  "that re-reading its attention cache stays a small part of each step; at most --prefill-chunk: no growth")
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
      if (!a->state_budget.empty()) {
        o.engine.scheduler.memory_budget = parse_byte_size(a->state_budget);
        K3_CHECK(o.engine.scheduler.memory_budget > 0, "--state-budget: must be more than 0 bytes (got '",
                 a->state_budget, "')");
      }
      check_model_loads(o.engine.model_dir, a->ctx);
      if (follow_rank_zero(o.engine.model_dir)) return 0;  // ranks 1..R-1: rank 0 serves
      const mirror::StopOnExit stop_followers;
      ReadyWatcher ready;  // destroyed (its thread joined) before run_server's result or error leaves
      const int rc = server::run_server(o, [&](int port) {
        std::printf("k3 serve: listening on http://%s:%d (model %s loading)\n", o.host.c_str(), port, name.c_str());
        std::fflush(stdout);
        ready.start(o.host, port, name);
      });
      const dist::PlanStats p = dist::plan_stats();  // the throughput layout's balance, for -v
      if (p.steps > 0)
        log_info("expert pairs per rank, max / mean over ", p.steps, " MoE steps: ", p.mean_planned, " (worst ",
                 p.worst_planned, ") with the plan, ", p.mean_home, " (worst ", p.worst_home,
                 ") with every pair on its expert's home");
      return rc;
    };
  });
}

}  // namespace k3::cli
