// k3 env bench: what sandboxes cost on this host, for comparison with AgentENV's published
// figures (docs/agentenv.md): create-to-first-command latency alone and with N sandboxes made at
// once, the latency of a command in a warm sandbox, fork-to-first-command, pause and resume.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "agentenv/sandbox_manager.h"
#include "base/error.h"
#include "cli/commands.h"

namespace k3::cli {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct Stats {
  double median = 0, p95 = 0, max = 0;
  size_t n = 0;
};

Stats stats_of(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.n = v.size();
  s.median = v[v.size() / 2];
  s.p95 = v[std::min(v.size() - 1, static_cast<size_t>(0.95 * static_cast<double>(v.size())))];
  s.max = v.back();
  return s;
}

struct BenchArgs {
  int concurrent = 16, samples = 20, workspace_mb = 16;
  std::string state_dir, json;
};

void first_command(agentenv::Sandbox& sb) {
  agentenv::ExecRequest r;
  r.command = "true";
  agentenv::ExecResult res = sb.exec(r);
  K3_CHECK(res.exit_code == 0, "sandbox ", sb.id(), ": `true` exited with ", res.exit_code, ": ", res.stderr_text);
}

int run_env_bench(const BenchArgs& a) {
  const agentenv::HostSupport& host = agentenv::host_support();
  K3_CHECK(host.ok, "sandboxes cannot run on this host: ", host.problem);
  agentenv::ManagerOptions o;
  o.state_dir = a.state_dir.empty() ? cache_dir() + "/env-bench" : a.state_dir;
  o.max_sandboxes = std::max(64, a.concurrent + a.samples + 2);
  std::filesystem::remove_all(o.state_dir);
  agentenv::SandboxManager m(o);
  std::vector<std::pair<std::string, Stats>> rows;
  auto row = [&](const std::string& what, const std::vector<double>& ms) {
    rows.emplace_back(what, stats_of(ms));
    const Stats& s = rows.back().second;
    std::fprintf(stderr, "  %-44s median %8.1f ms   p95 %8.1f ms   (%zu)\n", what.c_str(), s.median, s.p95, s.n);
  };
  std::fprintf(stderr, "k3 env bench: %d samples, %d at once, cgroups %s\n", a.samples, a.concurrent, host.cgroups.c_str());

  // One at a time: create, then the first command.
  std::vector<double> create_first;
  for (int i = 0; i < a.samples; ++i) {
    auto t0 = Clock::now();
    auto sb = m.create({});
    first_command(*sb);
    create_first.push_back(ms_since(t0));
    m.destroy(sb->id());
  }
  row("create -> first command (one at a time)", create_first);

  // N at once, each from its own thread.
  std::vector<double> burst(static_cast<size_t>(a.concurrent));
  std::vector<std::shared_ptr<agentenv::Sandbox>> boxes(static_cast<size_t>(a.concurrent));
  std::vector<std::string> errors(static_cast<size_t>(a.concurrent));
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < a.concurrent; ++i)
      threads.emplace_back([&, i] {
        try {
          auto t0 = Clock::now();
          boxes[i] = m.create({});
          first_command(*boxes[i]);
          burst[i] = ms_since(t0);
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
    for (auto& t : threads) t.join();
  }
  for (const auto& e : errors) K3_CHECK(e.empty(), e);
  row("create -> first command (" + std::to_string(a.concurrent) + " at once)", burst);

  // A command in a warm sandbox.
  std::vector<double> warm;
  for (int i = 0; i < a.samples * 5; ++i) {
    auto t0 = Clock::now();
    first_command(*boxes[0]);
    warm.push_back(ms_since(t0));
  }
  row("command in a running sandbox (`true`)", warm);

  // Fork of a sandbox holding a workspace of a few files, then the child's first command.
  auto parent = boxes[1];
  {
    agentenv::ExecRequest fill;
    fill.command = "for i in $(seq 1 " + std::to_string(a.workspace_mb) + "); do head -c 1048576 /dev/urandom > f$i; done";
    fill.timeout_s = 300;
    K3_CHECK(parent->exec(fill).exit_code == 0, "filling the parent's workspace failed");
  }
  for (auto& b : boxes)
    if (b != boxes[0] && b != parent) m.destroy(b->id());
  std::vector<double> fork_first, pause_ms, resume_ms;
  for (int i = 0; i < a.samples; ++i) {
    auto t0 = Clock::now();
    auto kids = m.fork(parent->id(), 1);
    first_command(*kids[0]);
    fork_first.push_back(ms_since(t0));
    m.destroy(kids[0]->id());
    t0 = Clock::now();
    m.pause(parent->id());
    pause_ms.push_back(ms_since(t0));
    t0 = Clock::now();
    m.resume(parent->id());
    resume_ms.push_back(ms_since(t0));
  }
  row("fork (" + std::to_string(a.workspace_mb) + " MiB written) -> first command", fork_first);
  row("pause (freeze)", pause_ms);
  row("resume (thaw)", resume_ms);
  for (const auto& info : m.list()) m.destroy(info.id);

  if (!a.json.empty()) {
    nlohmann::json out = {{"cgroups", host.cgroups}, {"concurrent", a.concurrent}, {"samples", a.samples}};
    for (const auto& [what, s] : rows) out["rows"].push_back({{"what", what}, {"median_ms", s.median}, {"p95_ms", s.p95}, {"max_ms", s.max}, {"n", s.n}});
    std::ofstream(a.json) << out.dump(2) << "\n";
  }
  std::filesystem::remove_all(o.state_dir);
  return 0;
}

}  // namespace

void add_env_bench_command(CLI::App& env, Runner& run) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* sub = env.add_subcommand("bench", "sandbox start, command, fork, pause and resume latencies on this host");
  sub->add_option("--concurrent", args->concurrent, "sandboxes created at once (default 16)")->check(CLI::Range(1, 256));
  sub->add_option("--samples", args->samples, "samples per sequential measurement (default 20)")->check(CLI::Range(1, 10000));
  sub->add_option("--workspace-mb", args->workspace_mb, "MiB written in the forked sandbox (default 16)")->check(CLI::Range(0, 4096));
  sub->add_option("--state-dir", args->state_dir, "scratch state folder (default: <k3 cache>/env-bench; emptied)")->check(kNonEmpty);
  sub->add_option("--json", args->json, "also write the figures here");
  sub->callback([&run, args] { run = [args] { return run_env_bench(*args); }; });
}

}  // namespace k3::cli
