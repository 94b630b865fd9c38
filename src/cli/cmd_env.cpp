// `k3 env`: sandboxed agent environments (docs/agentenv.md).
//   k3 env serve   the sandbox API over HTTP (cmd_env_serve.cpp)
//   k3 env run     episodes: the model solves task folders with tools in sandboxes (cmd_env_run.cpp)
//   k3 env bench   sandbox start, command and fork latencies on this host (cmd_env_bench.cpp)
#include "cli/commands.h"

namespace k3::cli {

void add_env_command(CLI::App& app, Runner& run) {
  CLI::App* env = app.add_subcommand("env", "sandboxed agent environments: serve sandboxes, run episodes");
  env->require_subcommand(1);
  add_env_serve_command(*env, run);
  add_env_run_command(*env, run);
  add_env_bench_command(*env, run);
}

}  // namespace k3::cli
