// Containment: each test makes one attack from inside a sandbox (or through its file API) and
// checks that it is stopped, printing a line "CONTAINED | attack | what stopped it".
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "agentenv/cgroup.h"
#include "agentenv/sandbox_test_util.h"

namespace k3::agentenv {
namespace {

using testing::ScratchManager;
using testing::run;

void contained(const std::string& attack, const std::string& stopped_by) {
  std::cout << "CONTAINED | " << attack << " | " << stopped_by << std::endl;
}

// A file on the host outside any sandbox, in a fresh folder.
struct HostSecret {
  testing::TempDir dir;
  std::string path = dir.file("secret.txt");
  HostSecret() { std::ofstream(path) << "host secret"; }
};

TEST(Containment, PathTraversalInTheFileApi) {
  K3_REQUIRE_SANDBOXES();
  HostSecret secret;
  ScratchManager m;
  auto sb = m->create({});
  for (const std::string& p : {"../../../../../../.." + secret.path, secret.path, "/workspace/../../.." + secret.path}) {
    EXPECT_THROW(sb->read_file(p), NotFound) << p;
  }
  const std::string escape = secret.dir.file("written-from-sandbox");
  sb->write_file("../../../../.." + escape, "x");  // lands inside the sandbox, at the same path
  EXPECT_FALSE(std::filesystem::exists(escape));
  EXPECT_EQ(sb->read_file(escape), "x");
  contained("read/write a host file through ../ and absolute paths in the file API",
            "openat2 RESOLVE_IN_ROOT: every path resolves under the sandbox's root");
}

TEST(Containment, SymlinksPointingOut) {
  K3_REQUIRE_SANDBOXES();
  HostSecret secret;
  ScratchManager m;
  auto sb = m->create({});
  ASSERT_EQ(run(*sb, "ln -s " + secret.path + " abs; ln -s ../../../../../../.. up; "
                     "ln -s /proc/1/root/" + secret.path + " magic").exit_code, 0);
  EXPECT_THROW(sb->read_file("abs"), NotFound);
  EXPECT_THROW(sb->read_file("up" + secret.path), NotFound);
  EXPECT_NE(testing::error_of([&] { sb->read_file("magic"); }), "");
  // Writing through the link creates its target inside the sandbox (its folder made first).
  ASSERT_EQ(run(*sb, "mkdir -p " + secret.dir.path()).exit_code, 0);
  sb->write_file("abs", "through the link");
  EXPECT_EQ(sb->read_file(secret.path), "through the link");
  std::ifstream in(secret.path);
  std::string host;
  std::getline(in, host);
  EXPECT_EQ(host, "host secret");
  EXPECT_EQ(run(*sb, "cat abs; cat up" + secret.path + " 2>&1 | head -c 200").stdout_text.find("host secret"),
            std::string::npos);
  contained("symlinks to host paths (absolute, ../ chains, /proc/1/root) read or written by the file API and by commands",
            "RESOLVE_IN_ROOT + RESOLVE_NO_MAGICLINKS in the file API; the mount namespace for commands");
}

TEST(Containment, HostProcessesInvisible) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  auto sb = m->create({});
  const std::string me = std::to_string(getpid());
  ExecResult r = run(*sb, "ls /proc/" + me + " >/dev/null 2>&1 && echo seen; kill -9 " + me +
                              " 2>&1; for p in /proc/[0-9]*; do cat $p/comm; done");
  EXPECT_EQ(r.stdout_text.find("seen"), std::string::npos);
  EXPECT_NE(r.stdout_text.find("No such process"), std::string::npos) << r.stdout_text;
  EXPECT_EQ(r.stdout_text.find("agentenv_sandbox"), std::string::npos);  // this test's own name
  EXPECT_THROW(sb->read_file("/proc/1/environ"), Error);
  contained("see or signal host processes through /proc/<host pid> and kill",
            "PID namespace: only the sandbox's processes exist inside; /proc files refused by the file API");
}

TEST(Containment, MountsAndNamespaceTricks) {
  K3_REQUIRE_SANDBOXES();
  HostSecret secret;
  ScratchManager m;
  auto sb = m->create({});
  ExecResult r = run(*sb,
                     "mkdir -p /tmp/m; mount --bind / /tmp/m 2>&1 || echo mount-failed; "
                     "mount -t proc proc /tmp/m 2>&1 || echo proc-failed; "
                     "unshare -Urm true 2>&1 || echo unshare-failed; "
                     "chroot / true 2>&1 || echo chroot-failed; "
                     "cat " + secret.path + " 2>&1; grep Cap /proc/self/status");
  EXPECT_NE(r.stdout_text.find("mount-failed"), std::string::npos) << r.stdout_text;
  EXPECT_NE(r.stdout_text.find("proc-failed"), std::string::npos);
  EXPECT_NE(r.stdout_text.find("unshare-failed"), std::string::npos);
  EXPECT_NE(r.stdout_text.find("chroot-failed"), std::string::npos);
  EXPECT_EQ(r.stdout_text.find("host secret"), std::string::npos);
  EXPECT_NE(r.stdout_text.find("CapEff:\t0000000000000000"), std::string::npos);
  EXPECT_NE(r.stdout_text.find("CapBnd:\t0000000000000000"), std::string::npos);
  contained("bind-mount /, mount proc, new user namespace, chroot",
            "no capabilities (bounding set empty, no new privileges) and the seccomp filter (mount, unshare(CLONE_NEWUSER), chroot: EPERM)");
}

TEST(Containment, NoNetworkByDefault) {
  K3_REQUIRE_SANDBOXES();
  // A listener on the host's loopback.
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  ScratchManager m;
  auto none = m->create({});
  const std::string probe = "bash -c 'exec 3<>/dev/tcp/127.0.0.1/" + port + "' 2>&1; bash -c 'exec 3<>/dev/tcp/1.1.1.1/53' 2>&1";
  ExecResult r = run(*none, probe);
  EXPECT_NE(r.stdout_text.find("Network is unreachable"), std::string::npos) << r.stdout_text;
  CreateOptions lo;
  lo.spec.network = Network::kLoopback;
  auto with_lo = m->create(lo);
  r = run(*with_lo, probe);
  // Loopback is up but it is the sandbox's own: the host's listener is not there.
  EXPECT_NE(r.stdout_text.find("Connection refused"), std::string::npos) << r.stdout_text;
  EXPECT_NE(r.stdout_text.find("Network is unreachable"), std::string::npos) << r.stdout_text;
  ::close(fd);
  contained("reach the host's loopback and the internet",
            "network namespace with no interface up (loopback on request, still its own)");
}

TEST(Containment, OtherSandboxesInvisible) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  auto a = m->create({});
  auto b = m->create({});
  ASSERT_EQ(run(*a, "echo a-secret > /workspace/secret; echo a > /tmp/only-a; sleep 1000 >/dev/null 2>&1 &").exit_code, 0);
  ExecResult r = run(*b, "cat /workspace/secret /tmp/only-a 2>&1; for p in /proc/[0-9]*; do cat $p/comm; done; "
                         "pkill sleep 2>&1; kill -9 -1 2>&1; echo done");
  EXPECT_EQ(r.stdout_text.find("a-secret"), std::string::npos);
  EXPECT_EQ(r.stdout_text.find("sleep"), std::string::npos) << r.stdout_text;
  EXPECT_THROW(b->read_file("/tmp/only-a"), NotFound);
  EXPECT_EQ(run(*a, "for p in /proc/[0-9]*; do cat $p/comm; done").stdout_text.find("sleep") != std::string::npos, true)
      << "b's kill reached a's process";
  contained("read another sandbox's files, see or kill its processes",
            "separate mount and PID namespaces, separate uid ranges");
}

TEST(Containment, ForkBombHeldByPidsLimit) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  CreateOptions c;
  c.spec.limits.pids = 64;
  auto bomb = m->create(c);
  auto other = m->create({});
  auto t0 = std::chrono::steady_clock::now();
  ExecResult r = run(*bomb, "bomb() { bomb | bomb & }; bomb; sleep 5", 3);
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10);
  EXPECT_EQ(run(*other, "echo fine").stdout_text, "fine\n");
  EXPECT_EQ(run(*bomb, "echo recovered").stdout_text, "recovered\n");
  contained("fork bomb", "pids cgroup (pids.max 64), then the command's timeout killed its whole cgroup leaf");
}

TEST(Containment, MemoryHogKilledInItsOwnCgroup) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  CreateOptions c;
  c.spec.limits.memory_bytes = 64 << 20;
  auto hog = m->create(c);
  auto other = m->create({});
  ExecResult r = run(*hog, "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived ${#x}", 60);
  EXPECT_TRUE(r.oom_killed) << r.stdout_text << r.stderr_text;
  EXPECT_EQ(r.stdout_text.find("survived 200000000"), std::string::npos);
  EXPECT_EQ(run(*other, "echo fine").stdout_text, "fine\n");
  EXPECT_EQ(run(*hog, "echo recovered").stdout_text, "recovered\n");
  contained("allocate 200 MB under a 64 MiB limit", "memory cgroup: the OOM killer ended the hog inside its own group");
}

TEST(Containment, CpuHogCapped) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  CreateOptions c;
  c.spec.limits.cpus = 0.25;
  auto hog = m->create(c);
  // Four spinning shells for 2 s of wall time; `times` reports their CPU use.
  ExecResult r = run(*hog,
                     "for i in 1 2 3 4; do (end=$(($(date +%s)+2)); while [ $(date +%s) -lt $end ]; do :; done) & done; "
                     "wait; cat /proc/self/stat >/dev/null; times", 30);
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  // The second line of `times`: children's user and system time, e.g. "0m0.480s 0m0.020s".
  double user = 0, sys = 0;
  auto nl = r.stdout_text.find('\n');
  ASSERT_NE(nl, std::string::npos);
  int um, sm;
  ASSERT_EQ(std::sscanf(r.stdout_text.c_str() + nl + 1, "%dm%lfs %dm%lfs", &um, &user, &sm, &sys), 4) << r.stdout_text;
  const double cpu = um * 60 + user + sm * 60 + sys;
  EXPECT_LT(cpu, 1.2) << "4 spinners for ~2 s under a 0.25-CPU cap used " << cpu << " s of CPU";
  contained("4 busy loops for 2 s", "cpu cgroup quota (0.25 CPU): " + std::to_string(cpu) + " s of CPU used");
}

TEST(Containment, RunawayOutputCapped) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  auto sb = m->create({});
  ExecRequest req;
  req.command = "yes";
  req.output_cap = 4096;
  req.max_output = 8 << 20;
  req.timeout_s = 60;
  auto t0 = std::chrono::steady_clock::now();
  ExecResult r = sb->exec(req);
  EXPECT_TRUE(r.output_limit);
  EXPECT_TRUE(r.truncated());
  EXPECT_LT(r.stdout_text.size(), 4096u + 100);
  EXPECT_NE(r.stdout_text.find("bytes omitted"), std::string::npos);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30);
  contained("`yes` writing without end", "output cap: 4 KiB kept (head and tail), killed after 8 MiB");
}

TEST(Containment, TimeoutKillsTheWholeTree) {
  K3_REQUIRE_SANDBOXES();
  ScratchManager m;
  auto sb = m->create({});
  ExecResult r = run(*sb, "(sleep 1000 &) ; setsid sleep 1001 & nohup sleep 1002 >/dev/null 2>&1 & sleep 1003", 0.5);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.signal, SIGKILL);
  const std::string left = run(*sb, "for p in /proc/[0-9]*; do cat $p/cmdline | tr '\\0' ' '; echo; done").stdout_text;
  EXPECT_EQ(left.find("sleep 100"), std::string::npos) << left;
  contained("a command past its timeout, with detached, setsid and nohup children",
            "its own cgroup leaf: frozen, every process SIGKILLed, thawed");
}

// The processes in the cgroups of sandbox `id`, whichever manager group holds it.
std::vector<int> sandbox_pids(const std::string& id) {
  std::vector<int> pids;
  const std::string base = CgroupTree::dirs_of("").front();
  for (const auto& group : std::filesystem::directory_iterator(base)) {
    const std::string dir = group.path().string() + "/" + id;
    if (group.path().filename().string().rfind("k3env-", 0) != 0 || !std::filesystem::exists(dir)) continue;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
      if (e.path().filename() != "cgroup.procs") continue;
      std::ifstream in(e.path());
      int pid;
      while (in >> pid) pids.push_back(pid);
    }
  }
  return pids;
}

bool process_alive(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  if (!std::getline(stat, s)) return false;
  auto close = s.rfind(')');
  return close != std::string::npos && s.size() > close + 2 && s[close + 2] != 'Z';
}

TEST(Containment, KilledServerLeavesNoProcess) {
  K3_REQUIRE_SANDBOXES();
  testing::TempDir dir;
  // `k3 env serve` on any free port; its first line names the port.
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const std::string k3 = testing::k3_binary(), state = dir.file("state");
  pid_t server = ::fork();
  ASSERT_GE(server, 0);
  if (server == 0) {
    ::dup2(out[1], 1);
    ::execl(k3.c_str(), k3.c_str(), "env", "serve", "--port", "0", "--state-dir", state.c_str(), nullptr);
    ::_exit(127);
  }
  ::close(out[1]);
  std::string line;
  char c;
  while (::read(out[0], &c, 1) == 1 && c != '\n') line += c;
  auto colon = line.rfind(':');
  ASSERT_NE(colon, std::string::npos) << "k3 env serve printed: " << line;
  const int port = std::atoi(line.c_str() + colon + 1);
  httplib::Client api("127.0.0.1", port);
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    auto created = api.Post("/sandboxes", "{}", "application/json");
    ASSERT_TRUE(created && created->status == 201) << (created ? created->body : "no reply");
    ids.push_back(nlohmann::json::parse(created->body).at("sandboxID").get<std::string>());
    auto ran = api.Post("/sandboxes/" + ids.back() + "/commands",
                        R"({"cmd": "sleep 1000 >/dev/null 2>&1 & sleep 1001 >/dev/null 2>&1 &"})", "application/json");
    ASSERT_TRUE(ran && ran->status == 200) << (ran ? ran->body : "no reply");
  }
  auto paused = api.Post("/sandboxes/" + ids[1] + "/pause", "{}", "application/json");
  ASSERT_TRUE(paused && paused->status == 200);
  std::vector<int> pids;
  for (const auto& id : ids)
    for (int pid : sandbox_pids(id)) pids.push_back(pid);
  EXPECT_GE(pids.size(), 6u);  // 2 × (PID 1 + 2 sleeps)
  ::kill(server, SIGKILL);
  ::waitpid(server, nullptr, 0);
  ::close(out[0]);
  int left = 0;
  for (int i = 0; i < 100; ++i) {
    left = 0;
    for (int pid : pids) left += process_alive(pid);
    if (left == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(left, 0) << "sandbox processes outlived their killed server";
  bool groups_left = true;
  for (int i = 0; i < 100 && groups_left; ++i) {
    groups_left = false;
    for (const auto& id : ids) groups_left |= !sandbox_pids(id).empty();
    if (groups_left) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(groups_left) << "cgroups outlived their killed server";
  contained("`k3 env serve` killed (SIGKILL) with a running and a paused (frozen) sandbox",
            "PID 1's parent-death signal, and the guardian process thawing and killing the server's cgroups");
}

}  // namespace
}  // namespace k3::agentenv
