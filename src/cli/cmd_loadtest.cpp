// k3 loadtest: output tokens/s of a running `k3 serve` at several concurrency levels
// (src/server/load_test.h), printed as a table; with --soak DURATION, a soak of that server under a
// mixed load that checks every request is accounted for and memory stays bounded (src/server/soak.h).
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/commands.h"
#include "server/load_test.h"
#include "server/soak.h"

namespace k3::cli {
namespace {

struct SoakArgs {
  std::string duration;  // "" = the throughput levels, not a soak
  std::string seed;      // "" = random (kUnsigned64 checks it)
  std::string json;
  double rss_growth_mb = 64;
  double max_body_mb = 32;
  double warmup = 0.1;
};

int run_soak_command(const server::LoadTestOptions& lo, const SoakArgs& a, bool concurrency_given,
                     bool max_tokens_given) {
  server::SoakOptions o;
  o.url = lo.url;
  o.api_key = lo.api_key;
  o.model = lo.model;
  o.duration_s = server::parse_soak_duration(a.duration);
  if (concurrency_given) {
    K3_CHECK(lo.concurrency.size() == 1, "--soak takes one --concurrency (the number of clients), not ",
             lo.concurrency.size());
    o.concurrency = lo.concurrency[0];
  }
  if (max_tokens_given) o.max_tokens = lo.max_tokens;
  if (!a.seed.empty()) {
    o.seed = std::stoull(a.seed);
    K3_CHECK(o.seed != 0, "--seed 0 is reserved for 'draw one'; give a seed >= 1");
  }
  o.rss_growth_bound_bytes = static_cast<uint64_t>(a.rss_growth_mb * 1024 * 1024);
  o.max_body_bytes = static_cast<uint64_t>(a.max_body_mb * 1024 * 1024);
  o.warmup_fraction = a.warmup;
  // The JSON file is opened before the soak, so a bad path does not throw away a long run.
  std::ofstream json;
  if (!a.json.empty()) {
    json.open(a.json, std::ios::binary | std::ios::trunc);
    K3_CHECK(json.good(), "cannot write the JSON report to ", a.json);
  }
  std::printf("soak of %s: %d clients for %.1f s\n", o.url.c_str(), o.concurrency, o.duration_s);
  std::fflush(stdout);
  const server::SoakResult r = server::run_soak(o);
  std::fputs(server::soak_report(r).c_str(), stdout);
  if (json.is_open()) {
    json << server::soak_json(r) << "\n";
    json.close();
    K3_CHECK(json.good(), "cannot write the JSON report to ", a.json);
  }
  return r.passed() ? 0 : 1;
}

}  // namespace

void add_loadtest_command(CLI::App& app, Runner& run) {
  auto o = std::make_shared<server::LoadTestOptions>();
  auto soak = std::make_shared<SoakArgs>();
  CLI::App* sub = app.add_subcommand(
      "loadtest", "Measure a running k3 serve: output tokens/s at several concurrencies, or a soak (--soak)");
  sub->add_option("--url", o->url, "Server base URL");
  CLI::Option* conc = sub->add_option("--concurrency", o->concurrency,
                                      "Concurrent clients per level (e.g. 1,4,16); with --soak one number (64)")
                          ->delimiter(',');
  CLI::Option* max_tokens = sub->add_option("--max-tokens", o->max_tokens,
                                            "New tokens per request (with --soak: the most per valid request, 16)")
                                ->check(kPositive);
  sub->add_option("--rounds", o->rounds, "Requests per client per level")->check(kPositive);
  sub->add_option("--prompt", o->prompt, "Prompt text (each request appends its number)");
  sub->add_option("--api-key", o->api_key, "Bearer key, when the server needs one");
  sub->add_option("--model", o->model, "The model id to send (default: none; with --soak the server's)");
  CLI::Option* soak_opt = sub->add_option(
      "--soak", soak->duration,
      "Soak for this long (90s, 30m, 1.5h): a mix of valid, dropped and bad requests; checks the accounting "
      "in /metrics and the server's memory; exit status 1 on any failure");
  sub->add_option("--seed", soak->seed, "Soak: the seed of the request mix (default: drawn, and printed)")
      ->check(kUnsigned64)
      ->needs(soak_opt);
  sub->add_option("--json", soak->json, "Soak: also write the report as JSON to this file")->needs(soak_opt);
  sub->add_option("--rss-growth-mb", soak->rss_growth_mb,
                  "Soak: the most the server's resident memory may grow after the warm-up, in MiB (64)")
      ->check(kMebibytesPositive)
      ->needs(soak_opt);
  sub->add_option("--max-body-mb", soak->max_body_mb,
                  "Soak: the server's --max-body-mb (32); oversized requests send 64 KiB more")
      ->check(kMebibytesPositive)
      ->needs(soak_opt);
  sub->add_option("--warmup", soak->warmup,
                  "Soak: the share of the duration before the warm-up memory sample (0.1)")
      ->check(CLI::Range(0.0, 0.99))
      ->needs(soak_opt);
  sub->callback([o, soak, conc, max_tokens, &run] {
    const bool concurrency_given = conc->count() > 0, max_tokens_given = max_tokens->count() > 0;
    run = [o, soak, concurrency_given, max_tokens_given]() {
      refuse_several_ranks("loadtest");
      if (!soak->duration.empty()) return run_soak_command(*o, *soak, concurrency_given, max_tokens_given);
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
