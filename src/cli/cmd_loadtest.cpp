// k3 loadtest: output tokens/s of a running `k3 serve` at several concurrency levels
// (src/server/load_test.h), printed as a table.
#include <cstdio>

#include "cli/commands.h"
#include "server/load_test.h"

namespace k3::cli {

void add_loadtest_command(CLI::App& app, Runner& run) {
  auto o = std::make_shared<server::LoadTestOptions>();
  CLI::App* sub = app.add_subcommand("loadtest", "Measure a running k3 serve: output tokens/s at several concurrencies");
  sub->add_option("--url", o->url, "Server base URL");
  sub->add_option("--concurrency", o->concurrency, "Concurrent clients per level (e.g. 1,4,16)")->delimiter(',');
  sub->add_option("--max-tokens", o->max_tokens, "New tokens per request")->check(kPositive);
  sub->add_option("--rounds", o->rounds, "Requests per client per level")->check(kPositive);
  sub->add_option("--prompt", o->prompt, "Prompt text (each request appends its number)");
  sub->add_option("--api-key", o->api_key, "Bearer key, when the server needs one");
  sub->add_option("--model", o->model, "The model id to send (default: none)");
  sub->callback([o, &run] {
    run = [o]() {
      refuse_several_ranks("loadtest");
      const std::vector<server::LoadTestLevel> levels = server::run_load_test(*o);
      std::printf("%-11s %8s %6s %13s %8s %11s %10s %16s\n", "concurrency", "requests", "failed", "output_tokens",
                  "wall_s", "output_tok/s", "mean_ttft_s", "per_stream_tok/s");
      for (const auto& l : levels)
        std::printf("%-11d %8d %6d %13lld %8.2f %11.1f %10.3f %16.1f\n", l.concurrency, l.requests, l.failed,
                    l.output_tokens, l.wall_s, l.tokens_per_s, l.mean_ttft_s, l.mean_stream_tokens_per_s);
      // Failed requests leave holes in the numbers above; say why, once per level, so a wrong
      // --api-key or --model is visible without reading the server's log.
      int status = 0;
      for (const auto& l : levels) {
        if (!l.failed) continue;
        std::printf("concurrency %d: %d of %d requests failed; first error: %s\n", l.concurrency, l.failed,
                    l.requests, l.first_error.c_str());
        status = 1;
      }
      return status;
    };
  });
}

}  // namespace k3::cli
