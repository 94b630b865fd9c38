// `k3 env run`: a model solves task folders with tools in sandboxes, through an OpenAI-compatible
// endpoint (src/agentenv/episode.h); writes a trajectory per task and RUN_DIR/summary.json, and
// prints a line per finished episode and a summary table.  Exit status 0 when every episode ran
// (whatever its reward), 1 when one ended with an error.
#include <cstdio>
#include <memory>
#include <string>

#include "agentenv/episode.h"
#include "agentenv/sandbox_manager.h"
#include "base/error.h"
#include "cli/commands.h"

namespace k3::cli {

void add_env_run_command(CLI::App& env, Runner& run) {
  auto o = std::make_shared<agentenv::RunOptions>();
  CLI::App* sub = env.add_subcommand(
      "run", "Run episodes: a model solves task folders with tools in sandboxes (via an OpenAI-compatible endpoint)");
  sub->add_option("--tasks", o->tasks_dir, "A task folder (instruction.md, task.toml, tests/), or a folder of them")
      ->required()
      ->check(kNonEmpty);
  sub->add_option("--base-url", o->agent.base_url, "The model's OpenAI-compatible server, e.g. http://127.0.0.1:8000")
      ->required()
      ->check(kNonEmpty);
  sub->add_option("--model", o->agent.model, "The model name to send (default: the first id of GET /v1/models)")
      ->check(kNonEmpty);
  sub->add_option("--api-key", o->agent.api_key, "Bearer key, when the server needs one");
  sub->add_option("--parallel", o->parallel, "Episodes at once, each in its own sandbox (1; at most 256)")
      ->check(kPositive);
  sub->add_option("--max-turns", o->agent.max_turns, "Model replies per episode (30)")->check(kPositive);
  sub->add_option("--temperature", o->agent.temperature, "Sampling temperature (0; at most 2)")->check(kNonNegative);
  sub->add_option("--max-tokens", o->agent.max_tokens, "New tokens per reply (1024)")->check(kPositive);
  sub->add_option("--out", o->out_dir, "RUN_DIR: trajectories (RUN_DIR/<task>/trajectory.json) and summary.json")
      ->required()
      ->check(kNonEmpty);
  sub->callback([o, &run] {
    run = [o]() {
      refuse_several_ranks("env run");
      K3_CHECK(o->parallel <= 256, "--parallel must be at most 256 (got ", o->parallel, ")");
      K3_CHECK(o->agent.temperature <= 2, "--temperature must be at most 2 (got ", o->agent.temperature, ")");
      const agentenv::HostSupport& host = agentenv::host_support();
      K3_CHECK(host.ok, "sandboxes cannot run on this host: ", host.problem);
      const agentenv::RunSummary s = agentenv::run_episodes(*o);
      std::printf("trajectories and summary.json in %s\n", o->out_dir.c_str());
      return s.errors == 0 ? 0 : 1;
    };
  });
}

}  // namespace k3::cli
