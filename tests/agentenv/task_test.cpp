// Task folders (src/agentenv/task.h): the sample tasks, task.toml's defaults and every error, and
// (with sandboxes) the files and setup command of a task and how the verifier's reward is read.
#include "agentenv/task.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "agentenv/sandbox_test_util.h"

namespace k3::testing {
namespace {

using agentenv::Task;

// A task folder under `root`: instruction.md, tests/test.sh, and task.toml when `toml` is given.
std::string make_task(const TempDir& root, const std::string& name, const std::string& toml = "",
                      const std::string& test_sh = "exit 0\n") {
  const std::string dir = root.file(name);
  std::filesystem::create_directories(dir + "/tests");
  write_file(dir + "/instruction.md", "Do the thing.\n");
  write_file(dir + "/tests/test.sh", test_sh);
  if (!toml.empty()) write_file(dir + "/task.toml", toml);
  return dir;
}

// The error of loading a task whose task.toml is `toml`.
std::string toml_error(const std::string& toml) {
  TempDir root;
  const std::string dir = make_task(root, "t", toml);
  return error_of([&] { agentenv::load_task(dir); });
}

TEST(Task, SampleTasksLoad) {
  const std::vector<Task> tasks = agentenv::load_tasks(test_data_path("agentenv/tasks"));
  ASSERT_EQ(tasks.size(), 3u);
  EXPECT_EQ(tasks[0].name, "count-errors");
  EXPECT_EQ(tasks[1].name, "fix-sum");
  EXPECT_EQ(tasks[2].name, "hello-world");

  const Task& hello = tasks[2];
  EXPECT_NE(hello.instruction.find("/workspace/hello.txt"), std::string::npos);
  EXPECT_EQ(hello.agent_timeout_s, 600);
  EXPECT_EQ(hello.verifier_timeout_s, 600);
  EXPECT_EQ(hello.spec.limits.memory_bytes, agentenv::SandboxLimits{}.memory_bytes);
  EXPECT_EQ(hello.spec.network, agentenv::Network::kNone);
  EXPECT_EQ(hello.spec.template_dir, "");
  EXPECT_EQ(hello.setup, "");
  EXPECT_TRUE(hello.metadata.empty());
  EXPECT_EQ(hello.tests_dir(), hello.dir + "/tests");

  const Task& sum = tasks[1];
  EXPECT_EQ(sum.agent_timeout_s, 300);
  EXPECT_EQ(sum.verifier_timeout_s, 60);
  EXPECT_EQ(sum.spec.limits.memory_bytes, int64_t{512} << 20);
  EXPECT_EQ(sum.spec.limits.pids, 128);
  EXPECT_EQ(sum.metadata["difficulty"], "easy");
  EXPECT_EQ(sum.metadata["tags"], nlohmann::ordered_json::array({"shell"}));

  EXPECT_NE(tasks[0].setup.find("make_log.sh"), std::string::npos);

  // A task folder by itself is one task.
  const std::vector<Task> one = agentenv::load_tasks(test_data_path("agentenv/tasks/fix-sum"));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].name, "fix-sum");
}

TEST(Task, EnvironmentSettings) {
  TempDir root;
  std::filesystem::create_directories(root.file("t/base"));
  const Task t = agentenv::load_task(make_task(root, "t", R"(
[environment]
memory = 2048
cpus = 1.5
pids = 64
network = "loopback"
template = "base"
setup = "touch ready"
)"));
  EXPECT_EQ(t.spec.limits.memory_bytes, int64_t{2} << 30);
  EXPECT_EQ(t.spec.limits.cpus, 1.5);
  EXPECT_EQ(t.spec.limits.pids, 64);
  EXPECT_EQ(t.spec.network, agentenv::Network::kLoopback);
  EXPECT_EQ(t.spec.template_dir, std::filesystem::canonical(root.file("t/base")).string());
  EXPECT_EQ(t.setup, "touch ready");
  for (const auto& [text, bytes] : std::vector<std::pair<std::string, int64_t>>{{"\"2G\"", int64_t{2} << 30},
                                                                                {"\"1.5g\"", int64_t{3} << 29},
                                                                                {"\"512MiB\"", int64_t{512} << 20},
                                                                                {"\"256MB\"", int64_t{256} << 20},
                                                                                {"\"4096K\"", int64_t{4} << 20},
                                                                                {"\"100\"", int64_t{100} << 20},
                                                                                {"\"1T\"", int64_t{1} << 40}}) {
    TempDir r;
    EXPECT_EQ(agentenv::load_task(make_task(r, "m", "[environment]\nmemory = " + text + "\n")).spec.limits.memory_bytes,
              bytes)
        << text;
  }
  TempDir r;
  EXPECT_EQ(agentenv::load_task(make_task(r, "f", "[agent]\ntimeout_sec = 0.5\n")).agent_timeout_s, 0.5);
}

TEST(Task, TomlErrorsNameFileKeyAndProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[agent\ntimeout_sec = 1\n", "task.toml:1:"},
      {"name = \"x\"\n",
       "task.toml: name (line 1) is not a known key (known: version, metadata, agent, verifier, environment)"},
      {"[agent]\ntimeout = 5\n", "task.toml: [agent] timeout (line 2) is not a known key (known: timeout_sec)"},
      {"[verifier]\nenv = 1\n", "[verifier] env (line 2) is not a known key (known: timeout_sec)"},
      {"[environment]\nimage = \"x\"\n",
       "[environment] image (line 2) is not a known key (known: memory, pids, cpus, network, template, setup)"},
      {"agent = 5\n", "task.toml: agent (line 1) must be a table ([agent]), not an integer"},
      {"metadata = \"x\"\n", "metadata (line 1) must be a table ([metadata]), not a string"},
      {"version = 1\n", "version (line 1) must be a string (got an integer)"},
      {"[agent]\ntimeout_sec = \"600\"\n", "[agent] timeout_sec (line 2) must be a number of seconds (got a string)"},
      {"[verifier]\ntimeout_sec = 0\n",
       "[verifier] timeout_sec (line 2) must be more than 0 and at most 86400 seconds (got 0)"},
      {"[agent]\ntimeout_sec = -3\n", "(got -3)"},
      {"[agent]\ntimeout_sec = 100000\n", "(got 100000)"},
      {"[agent]\ntimeout_sec = nan\n", "[agent] timeout_sec (line 2) must be more than 0 and at most 86400 seconds"},
      {"[environment]\nmemory = \"lots\"\n",
       "[environment] memory (line 2) must be a size such as \"512M\" or \"2G\", or an integer count of MiB (got "
       "\"lots\")"},
      {"[environment]\nmemory = \"2X\"\n", "(got \"2X\")"},
      {"[environment]\nmemory = \" 2G\"\n", "(got \" 2G\")"},
      {"[environment]\nmemory = \"0M\"\n", "[environment] memory (line 2) must be from 1 MiB to 1 TiB (got 0 MiB)"},
      {"[environment]\nmemory = -5\n", "must be from 1 MiB to 1 TiB (got -5 MiB)"},
      {"[environment]\nmemory = true\n", "memory (line 2) must be a size such as"},
      {"[environment]\nmemory = 2.5\n", "(got a float)"},
      {"[environment]\npids = \"many\"\n", "[environment] pids (line 2) must be an integer (got a string)"},
      {"[environment]\npids = 0\n", "[environment] pids (line 2) must be from 1 to 4194304 (got 0)"},
      {"[environment]\ncpus = 0\n", "[environment] cpus (line 2) must be more than 0 and at most 4096 (got 0)"},
      {"[environment]\ncpus = \"2\"\n", "[environment] cpus (line 2) must be a number of cores (got a string)"},
      {"[environment]\nnetwork = \"host\"\n",
       "[environment] network (line 2) must be \"none\" or \"loopback\" (got \"host\")"},
      {"[environment]\nnetwork = false\n", "[environment] network (line 2) must be a string (got a boolean)"},
      {"[environment]\ntemplate = \"no-such-dir\"\n", "[environment] template (line 2): "},
      {"[environment]\ntemplate = \"\"\n", "[environment] template (line 2) is empty"},
      {"[environment]\nsetup = \" \"\n", "[environment] setup (line 2) is empty"},
      {"[environment]\nsetup = [\"make\"]\n", "[environment] setup (line 2) must be a string (got an array)"},
  };
  for (const auto& [toml, expected] : cases) {
    const std::string e = toml_error(toml);
    EXPECT_NE(e.find(expected), std::string::npos) << "task.toml:\n" << toml << "error: " << e;
    EXPECT_NE(e.find("/t/task.toml"), std::string::npos) << e;
  }
  EXPECT_NE(toml_error("[environment]\ntemplate = \"no-such-dir\"\n").find("no-such-dir is not a directory"),
            std::string::npos);
}

TEST(Task, FolderErrors) {
  TempDir root;
  EXPECT_EQ(error_of([&] { agentenv::load_tasks(root.file("nope")); }),
            "the tasks folder " + root.file("nope") + " does not exist");
  write_file(root.file("file"), "x");
  EXPECT_EQ(error_of([&] { agentenv::load_tasks(root.file("file")); }),
            "the tasks folder " + root.file("file") + " is not a directory");
  EXPECT_EQ(error_of([&] { agentenv::load_task(root.file("file")); }),
            "the task folder " + root.file("file") + " is not a directory");
  std::filesystem::create_directories(root.file("empty"));
  EXPECT_NE(error_of([&] { agentenv::load_tasks(root.file("empty")); }).find("holds no tasks"), std::string::npos);

  const std::string t = make_task(root, "set/a");
  std::filesystem::create_directories(root.file("set/.hidden"));  // skipped
  EXPECT_EQ(agentenv::load_tasks(root.file("set")).size(), 1u);
  std::filesystem::create_directories(root.file("set/b"));
  EXPECT_NE(error_of([&] {
              agentenv::load_tasks(root.file("set"));
            }).find("has a sub-folder b that is not a task (no instruction.md)"),
            std::string::npos);

  std::filesystem::remove(t + "/tests/test.sh");
  EXPECT_NE(error_of([&] { agentenv::load_task(t); }).find("has no tests/test.sh (its verifier)"), std::string::npos);
  write_file(t + "/tests/test.sh", "exit 0\n");
  write_file(t + "/instruction.md", " \n\t\n");
  EXPECT_NE(error_of([&] { agentenv::load_task(t); }).find("instruction.md is empty"), std::string::npos);
  write_file(t + "/instruction.md", "caf\xe9\n");
  EXPECT_NE(error_of([&] { agentenv::load_task(t); }).find("instruction.md is not UTF-8 text"), std::string::npos);
  std::filesystem::remove(t + "/instruction.md");
  EXPECT_NE(error_of([&] { agentenv::load_task(t); }).find("has no instruction.md"), std::string::npos);
  write_file(t + "/instruction.md", "x");
  std::filesystem::create_directories(t + "/environment");
  write_file(t + "/environment/files", "not a folder");
  EXPECT_NE(error_of([&] { agentenv::load_task(t); }).find("environment/files is not a directory"), std::string::npos);
}

// A task whose verifier is `test_sh`, run in a fresh sandbox.
agentenv::VerifierResult verify(const std::string& test_sh, const std::string& before = "") {
  TempDir root;
  const Task task = agentenv::load_task(make_task(root, "v", "[verifier]\ntimeout_sec = 5\n", test_sh));
  ScratchManager m;
  auto sb = m->create({});
  if (!before.empty()) {
    agentenv::ExecRequest req;
    req.command = before;
    EXPECT_EQ(sb->exec(req).exit_code, 0) << before;
  }
  return agentenv::run_verifier(task, *sb);
}

TEST(TaskInSandbox, VerifierRewards) {
  K3_REQUIRE_SANDBOXES();
  agentenv::VerifierResult v = verify("echo 0.5 > /logs/verifier/reward.txt\n");
  EXPECT_EQ(v.reward, 0.5);
  EXPECT_EQ(v.reward_source, "reward.txt");
  EXPECT_EQ(v.error, "");

  v = verify("echo '{\"reward\": 0.25, \"tests\": 4}' > /logs/verifier/reward.json\n");
  EXPECT_EQ(v.reward, 0.25);
  EXPECT_EQ(v.reward_source, "reward.json");

  v = verify("echo checking; exit 0\n");
  EXPECT_EQ(v.reward, 1);
  EXPECT_EQ(v.reward_source, "exit code");
  EXPECT_EQ(v.exec.stdout_text, "checking\n");
  v = verify("exit 3\n");
  EXPECT_EQ(v.reward, 0);
  EXPECT_EQ(v.exec.exit_code, 3);

  v = verify("echo lots > /logs/verifier/reward.txt\n");
  EXPECT_EQ(v.reward, 0);
  EXPECT_EQ(v.error, "/logs/verifier/reward.txt holds 'lots', not a number");
  v = verify("echo '{\"score\": 1}' > /logs/verifier/reward.json\n");
  EXPECT_EQ(v.reward, 0);
  EXPECT_NE(v.error.find("has no number \"reward\""), std::string::npos) << v.error;
  v = verify("echo '{' > /logs/verifier/reward.json\n");
  EXPECT_EQ(v.error, "/logs/verifier/reward.json is not valid JSON");

  v = verify("sleep 30\n");
  EXPECT_TRUE(v.exec.timed_out);
  EXPECT_EQ(v.reward, 0);
  EXPECT_LT(v.seconds, 20);

  // What the agent left in /logs/verifier or /tests does not count.
  v = verify("test -e /tests/planted && exit 0; exit 1\n",
             "mkdir -p /logs/verifier /tests && echo 1 > /logs/verifier/reward.txt && touch /tests/planted");
  EXPECT_EQ(v.reward, 0);
  EXPECT_EQ(v.reward_source, "exit code");
  // The verifier runs in /workspace and sees its own files in /tests.
  v = verify("[ \"$(pwd)\" = /workspace ] && [ -f /tests/test.sh ] && echo 1 > /logs/verifier/reward.txt\n");
  EXPECT_EQ(v.reward, 1);
}

TEST(TaskInSandbox, FilesAndSetup) {
  K3_REQUIRE_SANDBOXES();
  TempDir root;
  const std::string dir = make_task(root, "s", "[environment]\nsetup = \"./run.sh > out.txt\"\n");
  std::filesystem::create_directories(dir + "/environment/files/sub/empty");
  write_file(dir + "/environment/files/run.sh", "#!/bin/sh\necho ran \"$(cat sub/data.txt)\"\n");
  chmod((dir + "/environment/files/run.sh").c_str(), 0755);
  write_file(dir + "/environment/files/sub/data.txt", "data");
  const Task task = agentenv::load_task(dir);
  ScratchManager m;
  auto sb = m->create({});
  agentenv::prepare_task_sandbox(task, *sb);
  EXPECT_EQ(sb->read_file("/workspace/out.txt"), "ran data\n");
  EXPECT_EQ(sb->stat("/workspace/sub/empty").type, "dir");
  EXPECT_EQ(sb->stat("/workspace/run.sh").mode & 0777, 0755u);
  EXPECT_EQ(sb->stat("/workspace/sub/data.txt").mode & 0777, 0644u);

  TempDir root2;
  const Task bad = agentenv::load_task(make_task(root2, "b", "[environment]\nsetup = \"echo broken >&2; exit 4\"\n"));
  auto sb2 = m->create({});
  EXPECT_EQ(error_of([&] { agentenv::prepare_task_sandbox(bad, *sb2); }),
            "the setup command of the task b failed (exit code 4): broken");
}

}  // namespace
}  // namespace k3::testing
