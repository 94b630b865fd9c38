// Task folders: what the model is asked to do, the sandbox it starts in, and the verifier that
// scores the result.  The layout follows Terminal-Bench / Harbor where it fits:
//
//   <task>/instruction.md        required: the user message the model gets
//   <task>/task.toml             optional:
//       version = "1.0"          (Harbor's schema version; accepted, unused)
//       [metadata]               anything; copied into the trajectory
//       [agent]       timeout_sec = 600      the agent's wall time (model calls and tools)
//       [verifier]    timeout_sec = 600      test.sh's wall time
//       [environment] memory = "2G"          bytes as "512M", "2G", "1.5G" (K/M/G/T, powers of
//                                            1024), or an integer count of MiB
//                     pids = 512             processes and threads at once
//                     cpus = 1.5             a hard cap in cores (default: none)
//                     network = "none"       or "loopback"
//                     template = "rootfs"    the sandbox's read-only base, a directory tree
//                                            (relative to the task folder); default: the host's
//                                            system directories
//                     setup = "make deps"    a shell command run in /workspace before the agent
//                                            starts (within the agent's timeout); failing fails
//                                            the episode
//   <task>/environment/files/    optional: copied into /workspace (executable files stay so)
//   <task>/tests/test.sh         required: the verifier.  After the agent stops, tests/ is copied
//                                to /tests of a fork of the final sandbox (the agent never sees
//                                it) and `bash /tests/test.sh` runs there in /workspace.  The
//                                reward is /logs/verifier/reward.txt (a number), else
//                                /logs/verifier/reward.json ({"reward": x}), else 1 when test.sh
//                                exited 0 and 0 when not.
//
// A Harbor environment/Dockerfile is not built: give a `template` tree instead.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agentenv/sandbox.h"

namespace k3::agentenv {

struct Task {
  std::string name;  // the folder's name
  std::string dir;   // the folder, absolute
  std::string instruction;
  double agent_timeout_s = 600;
  double verifier_timeout_s = 600;
  SandboxSpec spec;   // template, network and limits from [environment]
  std::string setup;  // "" = none
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();

  std::string files_dir() const { return dir + "/environment/files"; }
  std::string tests_dir() const { return dir + "/tests"; }
};

// Reads one task folder; throws k3::Error naming the file, key and problem.
Task load_task(const std::string& dir);
// `dir` itself when it holds instruction.md, else every sub-folder of it (sorted by name; those
// whose names start with '.' skipped), each of which must be a task.
std::vector<Task> load_tasks(const std::string& dir);

// Copies the regular files under host folder `from` into the sandbox folder `to` (created, as are
// empty sub-folders); files executable on the host are made executable (mode 755), the others get
// 644.  Throws k3::Error naming a file that is neither a regular file nor a folder.
void copy_into_sandbox(Sandbox& sandbox, const std::string& from, const std::string& to);

// Readies a new sandbox for the agent: environment/files into /workspace, then the setup command
// (throws k3::Error with its exit status and output when it fails).
void prepare_task_sandbox(const Task& task, Sandbox& sandbox);

struct VerifierResult {
  double reward = 0;
  std::string reward_source;  // "reward.txt", "reward.json" or "exit code"
  ExecResult exec;            // test.sh's run
  std::string error;          // "" or why the reward could not be read (the reward is then 0)
  double seconds = 0;
};
nlohmann::ordered_json to_json(const VerifierResult& v);

// Runs the task's verifier in `sandbox` (a fork of the agent's final sandbox): /tests and
// /logs/verifier are emptied first, so nothing the agent left there counts.  Throws k3::Error when
// test.sh cannot be started; a failing test.sh or an unreadable reward is a result.
VerifierResult run_verifier(const Task& task, Sandbox& sandbox);

}  // namespace k3::agentenv
