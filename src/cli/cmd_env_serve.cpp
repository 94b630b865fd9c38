// k3 env serve: this host's sandboxes over an HTTP API shaped like AgentENV's / E2B's
// (src/agentenv/env_server.h lists the routes).  Checks first that sandboxes can run here (root,
// namespaces, overlayfs, cgroups) and says why not; prints one line once listening.  Ctrl-C or
// SIGTERM stops it: the sandboxes' processes are killed, their files kept, and the next server over
// the same --state-dir finds them paused.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "agentenv/env_server.h"
#include "agentenv/sandbox_manager.h"
#include "base/error.h"
#include "cli/commands.h"

namespace k3::cli {

void add_env_serve_command(CLI::App& env, Runner& run) {
  struct Args {
    agentenv::EnvServerOptions server;
    agentenv::ManagerOptions manager;
    double max_body_mb = 64;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = env.add_subcommand("serve", "Serve sandboxes over an HTTP API shaped like AgentENV's / E2B's");
  sub->add_option("--host", a->server.host, "Address to bind (default 127.0.0.1: this machine only)")
      ->capture_default_str();
  sub->add_option("--port", a->server.port, "TCP port (0: any free port)")->check(CLI::Range(0, 65535))
      ->capture_default_str();
  sub->add_option("--api-key", a->server.api_key,
                  "Require the header 'X-API-Key: KEY' on every route but /health")
      ->envname("K3_ENV_API_KEY");
  sub->add_option("--state-dir", a->manager.state_dir,
                  "Folder of the sandboxes' files and settings (default: k3's cache folder/env); sandboxes an "
                  "earlier server left there come back paused")
      ->check(kNonEmpty);
  sub->add_option("--templates", a->server.templates_dir,
                  "Folder of template folders (each a root file system with /bin/sh) that requests may name as "
                  "\"template\"; without it sandboxes start from the host's /usr and /etc, read-only")
      ->check(CLI::ExistingDirectory);
  sub->add_option("--ttl", a->manager.default_ttl_s,
                  "Seconds a sandbox runs when its request gives no timeout; then it is paused (or destroyed)")
      ->check(kPositive)
      ->capture_default_str();
  sub->add_option("--max-sandboxes", a->manager.max_sandboxes, "Sandboxes held at once, running and paused")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  sub->add_option("--threads", a->server.threads,
                  "HTTP worker threads: requests served at once, each running command holding one")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  sub->add_option("--max-body-mb", a->max_body_mb, "Largest request body and file read or written, in MiB (beyond: 413)")
      ->check(kMebibytesPositive)
      ->capture_default_str();
  sub->callback([a, &run] {
    run = [a]() {
      const agentenv::HostSupport& host = agentenv::host_support();
      if (!host.ok) fail("sandboxes cannot run on this host: ", host.problem);
      agentenv::ManagerOptions manager = a->manager;
      if (manager.state_dir.empty()) manager.state_dir = cache_dir() + "/env";
      agentenv::EnvServerOptions options = a->server;
      if (!options.templates_dir.empty()) options.templates_dir = std::filesystem::canonical(options.templates_dir).string();
      options.max_body_bytes = static_cast<size_t>(a->max_body_mb * 1024 * 1024);
      agentenv::EnvServer server(std::make_unique<agentenv::SandboxManager>(manager), options);
      const int port = server.bind();
      const std::string shown = options.host.find(':') == std::string::npos ? options.host : "[" + options.host + "]";
      std::printf("k3 env: serving sandboxes on http://%s:%d (cgroups %s)\n", shown.c_str(), port, host.cgroups.c_str());
      std::fflush(stdout);
      server.listen(/*stop_on_signals=*/true);
      return 0;
    };
  });
}

}  // namespace k3::cli
