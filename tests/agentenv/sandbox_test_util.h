// Shared by the agentenv tests: whether this host can run sandboxes, and a manager over a
// scratch state folder.
#pragma once

#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "agentenv/sandbox_manager.h"
#include "support/test_support.h"

namespace k3::testing {

// "" when sandboxes can run here, else why not (not root, no namespaces, no cgroups...).
std::string sandbox_skip_reason();

// Skips the test when sandboxes cannot run here, or fails it when K3_REQUIRE_SANDBOX_TESTS=1.
#define K3_REQUIRE_SANDBOXES()                                                            \
  do {                                                                                    \
    const std::string k3_why = ::k3::testing::sandbox_skip_reason();                      \
    if (!k3_why.empty()) {                                                                \
      if (::k3::testing::sandbox_tests_required()) FAIL() << "sandboxes required: " << k3_why; \
      GTEST_SKIP() << "sandboxes cannot run here: " << k3_why;                            \
    }                                                                                     \
  } while (0)
bool sandbox_tests_required();

// A manager over a fresh state folder (removed with it), so its cgroup (named after the folder) is
// its own too.
struct ScratchManager {
  explicit ScratchManager(agentenv::ManagerOptions options = {});
  ~ScratchManager();
  TempDir dir;
  std::unique_ptr<agentenv::SandboxManager> manager;
  agentenv::SandboxManager* operator->() { return manager.get(); }
};

// Runs a shell command in the sandbox (/workspace, no input).
agentenv::ExecResult run(agentenv::Sandbox& sandbox, const std::string& command, double timeout_s = 30);

}  // namespace k3::testing
