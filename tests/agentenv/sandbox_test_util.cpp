#include "agentenv/sandbox_test_util.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace k3::testing {

std::string sandbox_skip_reason() {
  const agentenv::HostSupport& host = agentenv::host_support();
  return host.ok ? std::string() : host.problem;
}

bool sandbox_tests_required() {
  const char* v = std::getenv("K3_REQUIRE_SANDBOX_TESTS");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

ScratchManager::ScratchManager(agentenv::ManagerOptions options) {
  if (options.state_dir.empty()) options.state_dir = dir.file("state");
  manager = std::make_unique<agentenv::SandboxManager>(options);
}

ScratchManager::~ScratchManager() { manager.reset(); }

agentenv::ExecResult run(agentenv::Sandbox& sandbox, const std::string& command, double timeout_s) {
  agentenv::ExecRequest r;
  r.command = command;
  r.timeout_s = timeout_s;
  return sandbox.exec(r);
}

}  // namespace k3::testing
