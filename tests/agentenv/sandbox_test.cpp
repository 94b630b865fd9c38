// Sandboxes: commands, files, pause/resume, fork, TTL and restart, on a real manager (root only).
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "agentenv/sandbox_test_util.h"

namespace k3::agentenv {
namespace {

using testing::ScratchManager;
using testing::run;

TEST(Sandbox, RunsCommandsAsItsOwnRootInWorkspace) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  auto sb = m->create({});
  ExecResult r = run(*sb, "id -u; pwd; hostname; echo err >&2; exit 3");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.stdout_text, "0\n/workspace\nsandbox\n");
  EXPECT_EQ(r.stderr_text, "err\n");
  EXPECT_FALSE(r.timed_out);
  // Environment, working folder and standard input.
  ExecRequest req;
  req.command = "echo $GREETING; pwd; cat";
  req.cwd = "sub";
  req.env = {{"GREETING", "hi"}};
  req.stdin_data = "from stdin";
  run(*sb, "mkdir -p /workspace/sub");
  r = sb->exec(req);
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "hi\n/workspace/sub\nfrom stdin");
  // A working folder that does not exist is the command's error, not the server's.
  req.cwd = "/nope";
  r = sb->exec(req);
  EXPECT_EQ(r.exit_code, 126);
  EXPECT_NE(r.stderr_text.find("/nope"), std::string::npos);
}

TEST(Sandbox, StreamsOutputAsItComes) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  auto sb = m->create({});
  std::string streamed;
  ExecRequest req;
  req.command = "echo one; sleep 0.2; echo two >&2";
  ExecResult r = sb->exec(req, [&](int stream, std::string_view chunk) {
    streamed += (stream == 1 ? "out:" : "err:") + std::string(chunk);
  });
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(streamed, "out:one\nerr:two\n");
}

TEST(Sandbox, BadRequestsSayWhatIsWrong) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  auto sb = m->create({});
  ExecRequest req;
  EXPECT_NE(testing::error_of([&] { sb->exec(req); }).find("command: empty"), std::string::npos);
  req.command = "true";
  req.timeout_s = -1;
  EXPECT_NE(testing::error_of([&] { sb->exec(req); }).find("timeout"), std::string::npos);
  req.timeout_s = 5;
  req.env = {{"1BAD", "x"}};
  EXPECT_NE(testing::error_of([&] { sb->exec(req); }).find("1BAD"), std::string::npos);
  CreateOptions c;
  c.spec.limits.memory_bytes = 1024;
  EXPECT_NE(testing::error_of([&] { m->create(c); }).find("memory: at least 16 MiB"), std::string::npos);
  c = {};
  c.spec.template_dir = "/no/such/template";
  EXPECT_NE(testing::error_of([&] { m->create(c); }).find("is not a folder"), std::string::npos);
  EXPECT_THROW(m->get("sb-000000000000"), NotFound);
  EXPECT_NE(testing::error_of([&] { m->fork(sb->id(), 17); }).find("count: 1 to 16"), std::string::npos);
}

TEST(Sandbox, FilesRoundTripAndSayWhatIsWrong) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  auto sb = m->create({});
  sb->write_file("deep/er/note.txt", "hello\n");
  EXPECT_EQ(sb->read_file("/workspace/deep/er/note.txt"), "hello\n");
  sb->write_file("deep/er/note.txt", "more\n", /*append=*/true);
  EXPECT_EQ(run(*sb, "cat deep/er/note.txt; stat -c %u deep/er/note.txt").stdout_text, "hello\nmore\n0\n");
  auto entries = sb->list_dir("deep/er");
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].name, "note.txt");
  EXPECT_EQ(entries[0].type, "file");
  EXPECT_EQ(entries[0].size, 11u);
  EXPECT_EQ(sb->stat("deep").type, "dir");
  EXPECT_THROW(sb->read_file("missing.txt"), NotFound);
  EXPECT_NE(testing::error_of([&] { sb->read_file("deep"); }).find("is a folder"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { sb->list_dir("deep/er/note.txt"); }).find("is a file"), std::string::npos);
  FileLimits small;
  small.max_read = 4;
  EXPECT_NE(testing::error_of([&] { sb->read_file("deep/er/note.txt", small); }).find("more than the limit"),
            std::string::npos);
  // A FIFO would block a reader forever: refused at once.
  run(*sb, "mkfifo /workspace/fifo");
  EXPECT_NE(testing::error_of([&] { sb->read_file("fifo"); }).find("not a regular file"), std::string::npos);
  // The host's system folders are read-only inside.
  EXPECT_NE(testing::error_of([&] { sb->write_file("/usr/k3-test", "x"); }), "");
}

TEST(Sandbox, PauseFreezesAndResumeKeepsFilesAndProcesses) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  auto sb = m->create({});
  ASSERT_EQ(run(*sb, "sleep 1000 > /dev/null 2>&1 & echo $! > /workspace/pid").exit_code, 0);
  const std::string pid = sb->read_file("pid");
  m->pause(sb->id());
  EXPECT_EQ(m->info(sb->id()).state, SandboxState::kPaused);
  EXPECT_THROW(run(*sb, "true"), Conflict);
  EXPECT_EQ(sb->read_file("pid"), pid);  // files stay readable while frozen
  m->resume(sb->id());
  ExecResult r = run(*sb, "cat /proc/$(cat /workspace/pid)/comm");
  EXPECT_EQ(r.stdout_text, "sleep\n") << "the background process did not survive pause/resume";
}

TEST(Sandbox, ForkChildrenStartFromParentFilesAndStayApart) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  auto parent = m->create({});
  parent->write_file("shared.txt", "v1");
  run(*parent, "mkdir -p /root/.cache && echo cached > /root/.cache/x && rm -f /etc/../workspace/gone; "
               "echo tmp > /tmp/t; ln -s shared.txt /workspace/link");
  auto kids = m->fork(parent->id(), 2);
  ASSERT_EQ(kids.size(), 2u);
  EXPECT_EQ(m->info(parent->id()).state, SandboxState::kRunning);
  for (auto& kid : kids) {
    EXPECT_EQ(m->info(kid->id()).parent_id, parent->id());
    ExecResult r = run(*kid, "cat shared.txt link /root/.cache/x /tmp/t; id -u; stat -c %u shared.txt");
    EXPECT_EQ(r.stdout_text, "v1v1cached\ntmp\n0\n0\n") << r.stderr_text;
  }
  // Writes in one child reach neither its parent nor its sibling.
  kids[0]->write_file("shared.txt", "child0");
  run(*kids[0], "echo new > only-in-child0.txt; rm link");
  parent->write_file("shared.txt", "parent2");
  EXPECT_EQ(kids[1]->read_file("shared.txt"), "v1");
  EXPECT_EQ(parent->read_file("shared.txt"), "parent2");
  EXPECT_THROW(parent->read_file("only-in-child0.txt"), NotFound);
  EXPECT_THROW(kids[1]->read_file("only-in-child0.txt"), NotFound);
  EXPECT_EQ(kids[1]->read_file("link"), "v1");
  // A paused parent forks too, and stays paused.
  m->pause(parent->id());
  auto more = m->fork(parent->id(), 1);
  EXPECT_EQ(more[0]->read_file("shared.txt"), "parent2");
  EXPECT_EQ(m->info(parent->id()).state, SandboxState::kPaused);
}

TEST(Sandbox, TtlPausesOrDestroys) {
  K3_REQUIRE_SANDBOXES();
  agentenv::ManagerOptions o;
  o.sweep_interval_s = 0.1;
  ScratchManager m(o);
  CreateOptions pause_me, drop_me;
  pause_me.ttl_s = 0.5;
  drop_me.ttl_s = 0.5;
  drop_me.auto_pause = false;
  auto a = m->create(pause_me);
  auto b = m->create(drop_me);
  const std::string b_id = b->id();
  b.reset();
  for (int i = 0; i < 50 && m->info(a->id()).state != SandboxState::kPaused; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(m->info(a->id()).state, SandboxState::kPaused);
  for (int i = 0; i < 50 && m->list().size() > 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_THROW(m->info(b_id), NotFound);
  // A longer timeout keeps a resumed sandbox running.
  m->resume(a->id(), 60);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  EXPECT_EQ(m->info(a->id()).state, SandboxState::kRunning);
}

TEST(Sandbox, PausedSandboxesSurviveARestart) {
  K3_REQUIRE_SANDBOXES();
  testing::TempDir dir;
  agentenv::ManagerOptions o;
  o.state_dir = dir.file("state");
  std::string id, running_id;
  {
    SandboxManager m(o);
    auto sb = m.create({});
    id = sb->id();
    sb->write_file("kept.txt", "still here");
    m.pause(id);
    auto other = m.create({});
    running_id = other->id();
    other->write_file("also.txt", "kept");
    // A second manager on the same folder is refused while this one lives.
    EXPECT_NE(testing::error_of([&] { SandboxManager again(o); }).find("in use"), std::string::npos);
  }
  SandboxManager m(o);
  ASSERT_EQ(m.list().size(), 2u);
  SandboxInfo info = m.info(id);
  EXPECT_EQ(info.state, SandboxState::kPaused);
  EXPECT_FALSE(info.processes_alive);
  EXPECT_THROW(m.get(id)->read_file("kept.txt"), Conflict);
  m.resume(id);
  EXPECT_EQ(m.get(id)->read_file("kept.txt"), "still here");
  EXPECT_EQ(run(*m.get(id), "cat kept.txt").stdout_text, "still here");
  m.resume(running_id);
  EXPECT_EQ(m.get(running_id)->read_file("also.txt"), "kept");
  m.destroy(id);
  EXPECT_FALSE(std::filesystem::exists(o.state_dir + "/" + id));
}

TEST(Sandbox, SixteenAtOnce) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  std::vector<std::shared_ptr<Sandbox>> boxes;
  for (int i = 0; i < 16; ++i) boxes.push_back(m->create({}));
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i)
    threads.emplace_back([&, i] {
      ExecResult r = run(*boxes[i], "echo " + std::to_string(i) + " > n; sleep 0.5; cat n");
      if (r.exit_code == 0 && r.stdout_text == std::to_string(i) + "\n") ++ok;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 16);
  EXPECT_EQ(m->list().size(), 16u);
}

TEST(Sandbox, ForkCopiesSparseFilesSparseAndDeepTrees) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  auto parent = m->create({});
  // A 1 GiB file of one byte, and a file below 40 folders of 200 characters (past PATH_MAX).
  ASSERT_EQ(run(*parent, "truncate -s 1G sparse && printf x | dd of=sparse bs=1 seek=500000000 conv=notrunc 2>/dev/null; "
                         "d=$(printf 'd%.0s' $(seq 1 200)); for i in $(seq 1 40); do mkdir $d && cd $d; done; "
                         "echo deep > bottom.txt").exit_code, 0);
  auto kid = m->fork(parent->id(), 1)[0];
  ExecResult r = run(*kid, "stat -c %s sparse; dd if=sparse bs=1 skip=500000000 count=1 2>/dev/null; echo; "
                           "d=$(printf 'd%.0s' $(seq 1 200)); for i in $(seq 1 40); do cd $d; done; cat bottom.txt");
  EXPECT_EQ(r.stdout_text, "1073741824\nx\ndeep\n") << r.stderr_text;
  // The child's copy holds the data, not the holes.
  struct stat st;
  ASSERT_EQ(::stat((m.dir.file("state") + "/" + kid->id() + "/upper/workspace/sparse").c_str(), &st), 0);
  EXPECT_LT(st.st_blocks * 512, 1 << 20);
}

TEST(Sandbox, CommandThatClosesItsOutputStillTimesOut) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  auto sb = m->create({});
  auto t0 = std::chrono::steady_clock::now();
  ExecResult r = run(*sb, "exec >&- 2>&-; sleep 30", 1);
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5);
  // Without a timeout such a command is waited for to its end, with its exit status.
  r = run(*sb, "exec >&- 2>&-; sleep 0.3; exit 4");
  EXPECT_EQ(r.exit_code, 4);
}

TEST(Sandbox, PauseDuringACommandDoesNotHoldItsAnswer) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  auto sb = m->create({});
  ExecResult r;
  auto t0 = std::chrono::steady_clock::now();
  std::thread t([&] { r = run(*sb, "sleep 30", 1.5); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  m->pause(sb->id());
  t.join();
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 8);
  m->resume(sb->id());
  EXPECT_EQ(run(*sb, "echo back").stdout_text, "back\n");
}

TEST(Sandbox, Pid1KilledByItsOwnMemoryLimitIsRestartedForTheNextCommand) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  CreateOptions c;
  c.spec.limits.memory_bytes = 32 << 20;
  auto sb = m->create(c);
  sb->write_file("kept.txt", "files stay");
  // Every process of the sandbox may die, PID 1 too, even as the command starts.
  testing::error_of([&] { run(*sb, "head -c 60M /dev/zero > /dev/shm/fill", 30); });
  ExecResult r = run(*sb, "cat kept.txt");
  EXPECT_EQ(r.stdout_text, "files stay") << r.stderr_text;
}

TEST(Sandbox, Pid1ShowsNoneOfTheServersArguments) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  auto sb = m->create({});
  ExecResult r = run(*sb, "tr '\\0' ' ' < /proc/1/cmdline; echo; cat /proc/1/comm");
  EXPECT_EQ(r.stdout_text.rfind("k3-sandbox-init", 0), 0u) << r.stdout_text;
  EXPECT_EQ(r.stdout_text.find("agentenv_sandbox_test"), std::string::npos) << r.stdout_text;
}

TEST(Sandbox, ADeletedSandboxStaysDeletedForWhoeverStillHoldsIt) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  auto sb = m->create({});
  const std::string id = sb->id();
  m->destroy(id);
  EXPECT_THROW(run(*sb, "true"), NotFound);
  EXPECT_THROW(sb->read_file("x"), NotFound);
  EXPECT_FALSE(std::filesystem::exists(m.dir.file("state") + "/" + id));
}

TEST(Sandbox, TemplateFolderIsTheReadOnlyBase) {
  K3_REQUIRE_SANDBOXES();
  // A template with nothing but a shell and the libraries it loads (builtins only inside).
  testing::TempDir tpl;
  const std::string t = tpl.path();
  ASSERT_EQ(std::system(("mkdir -p " + t + "/bin " + t + "/etc " + t + "/proc " + t + "/dev " + t +
                         "/workspace && cp -L /bin/sh " + t + "/bin/sh && for f in $(ldd /bin/sh | grep -o '/[^ ]*'); "
                         "do mkdir -p " + t + "$(dirname $f) && cp -L $f " + t + "$f; done && echo base > " + t +
                         "/etc/motd").c_str()), 0);
  ScratchManager m;
  CreateOptions c;
  c.spec.template_dir = t;
  auto sb = m->create(c);
  // Its files belong to the host's root, which is nobody inside: readable, not writable; the
  // sandbox's root owns /, /workspace, /root and /tmp, whose changes live in its own layer.
  ExecResult r = run(*sb, "read line < /etc/motd; echo $line; echo changed > /etc/motd; echo mine > /workspace/f; "
                          "echo top > /new; read again < /etc/motd; echo $again");
  EXPECT_EQ(r.stdout_text, "base\nbase\n");
  EXPECT_NE(r.stderr_text.find("Permission denied"), std::string::npos) << r.stderr_text;
  EXPECT_EQ(sb->read_file("/workspace/f"), "mine\n");
  EXPECT_EQ(sb->read_file("/new"), "top\n");
  EXPECT_NE(testing::error_of([&] { sb->write_file("/etc/motd", "x"); }).find("Permission denied"), std::string::npos);
  std::ifstream motd(t + "/etc/motd");
  std::string line;
  std::getline(motd, line);
  EXPECT_EQ(line, "base");
  EXPECT_FALSE(std::filesystem::exists(t + "/workspace/f"));
}

}  // namespace
}  // namespace k3::agentenv
