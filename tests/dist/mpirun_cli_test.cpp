// `mpirun -np R k3 ...` as a user runs it: the same bytes as one process, one writer of stdout
// and files, and a clear, prompt end of the whole job when one rank cannot go on (a different
// checkpoint, a missing shard, a rank killed mid-generation).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "rank_process.h"
#include "support/test_support.h"

namespace k3 {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;

const std::string kMpirun = std::string(K3_MPIEXEC) +
                            " --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 --mca btl self,vader";

// The environment every mpirun here needs on a CI machine: root allowed, one thread per rank.
void set_env() {
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  ::setenv("K3_THREADS", "1", 1);
  // Under AddressSanitizer, no leak check: Open MPI keeps allocations in plug-ins it unloads at
  // exit, which cannot be symbolised or suppressed (tests/dist/CMakeLists.txt).
  const char* asan = std::getenv("ASAN_OPTIONS");
  ::setenv("ASAN_OPTIONS", (std::string(asan != nullptr ? asan : "") + ":detect_leaks=0").c_str(), 1);
}

CommandResult sh(const std::string& cmd) {
  testing::TempDir tmp;
  const std::string out = tmp.file("out"), err = tmp.file("err");
  const int status = std::system((cmd + " </dev/null >" + out + " 2>" + err).c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = testing::read_file(out);
  r.err = testing::read_file(err);
  return r;
}

std::string model() { return testing::fixture_dir("k3-tiny-a"); }

TEST(MpirunCli, LogitsAndGenerateEqualOneProcess) {
  set_env();
  testing::TempDir tmp;
  const std::string args = "logits --model " + model() + " --prompt-ids 3,14,15,92,65,35,89,79 --prefill-chunk 3";
  const CommandResult one = testing::run_k3(args + " --out " + tmp.file("one.safetensors"));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  for (int ranks : {2, 3}) {
    const std::string out = tmp.file("np" + std::to_string(ranks) + ".safetensors");
    const CommandResult r = sh(kMpirun + " -np " + std::to_string(ranks) + " " + testing::k3_binary() + " " + args +
                               " --out " + out);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(testing::read_file(out), testing::read_file(tmp.file("one.safetensors"))) << ranks << " ranks";
  }
  const std::string gen = "generate --model " + model() + " --prompt-ids 1,2,3 --max-tokens 12 --ignore-eos";
  const CommandResult g1 = testing::run_k3(gen);
  const CommandResult g3 = sh(kMpirun + " -np 3 " + testing::k3_binary() + " " + gen);
  ASSERT_EQ(g1.exit_code, 0) << g1.err;
  ASSERT_EQ(g3.exit_code, 0) << g3.err;
  EXPECT_FALSE(g1.out.empty());
  EXPECT_EQ(g3.out, g1.out);  // rank 0 alone writes stdout
  // The throughput layout, with copies of the experts on a second rank: the same tokens.
  const CommandResult t3 =
      sh(kMpirun + " -np 3 " + testing::k3_binary() + " --layout throughput --expert-replicas 1 " + gen);
  ASSERT_EQ(t3.exit_code, 0) << t3.err;
  EXPECT_EQ(t3.out, g1.out);
}

// bench over ranks: rank 0 reports (once) its share and the traffic per decoded token, and alone
// writes the JSON; the kernel figures, a one-process measurement, are skipped with a warning.
TEST(MpirunCli, BenchRunsTheModelOverRanks) {
  set_env();
  testing::TempDir tmp;
  const CommandResult r = sh(kMpirun + " -np 2 " + testing::k3_binary() + " bench --quick --model " + model() +
                             " --reps 1 --decode-tokens 2 --batch 2 --json " + tmp.file("b.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("the kernel figures are skipped"), std::string::npos) << r.err;
  const size_t at = r.out.find("over 2 ranks: the figures are rank 0's share; per decoded token it sent ");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("over 2 ranks", at + 1), std::string::npos) << r.out;
  const std::string json = testing::read_file(tmp.file("b.json"));
  EXPECT_NE(json.find("\"ranks\": 2"), std::string::npos) << json;
  EXPECT_EQ(json.find("\"sent_per_token\": 0.0"), std::string::npos) << json;
}

TEST(MpirunCli, ADifferentCheckpointOnOneRankIsNamed) {
  set_env();
  testing::TempDir tmp;
  const std::string other = tmp.file("other");
  testing::copy_dir(model(), other);
  std::string config = testing::read_file(other + "/config.json");
  const size_t at = config.find("\"rms_norm_eps\"");
  ASSERT_NE(at, std::string::npos);
  config.insert(at, "\"k3_test_marker\": 1, ");
  testing::write_file(other + "/config.json", config);
  const std::string args = " logits --prompt-ids 1,2,3 --out " + tmp.file("x.safetensors");
  const auto t0 = std::chrono::steady_clock::now();
  const CommandResult r = sh(kMpirun + " -np 1 " + testing::k3_binary() + args + " --model " + model() + " : -np 1 " +
                             testing::k3_binary() + args + " --model " + other);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("rank 1's checkpoint (config.json or shard headers) differs from rank 0's"), std::string::npos)
      << r.err;
  EXPECT_LT(secs, 30);
}

TEST(MpirunCli, AMissingShardOnOneRankEndsEveryRank) {
  set_env();
  testing::TempDir tmp;
  const std::string other = tmp.file("other");
  testing::copy_dir(model(), other);
  std::string shard;
  for (const std::string& f : testing::list_dir(other))
    if (f.rfind("model-", 0) == 0 && f.size() > 12 && f.compare(f.size() - 12, 12, ".safetensors") == 0) shard = f;
  ASSERT_FALSE(shard.empty());
  fs::remove(other + "/" + shard);
  const std::string args = " logits --prompt-ids 1,2,3 --out " + tmp.file("x.safetensors");
  const CommandResult r = sh(kMpirun + " -np 1 " + testing::k3_binary() + args + " --model " + model() + " : -np 1 " +
                             testing::k3_binary() + args + " --model " + other);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("rank 1 of 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(shard), std::string::npos) << r.err;
}


TEST(MpirunCli, ARankKilledMidGenerationEndsTheJobPromptly) {
  set_env();
  testing::TempDir tmp;
  const std::string tag = "K3_TEST_TAG=kill" + std::to_string(::getpid());
  const std::string cmd = "K3_TEST_TAG=kill" + std::to_string(::getpid()) + " " + kMpirun + " -x K3_TEST_TAG -np 3 " +
                          testing::k3_binary() + " generate --model " + model() +
                          " --prompt-ids 1,2,3 --max-tokens 100000 --ignore-eos >" + tmp.file("out") + " 2>" +
                          tmp.file("err") + " </dev/null";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait until the job is generating (rank 0 has printed tokens).
  pid_t victim = -1;
  for (int i = 0; i < 600 && (victim < 0 || testing::read_file(tmp.file("out")).size() < 20); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (victim < 0) victim = testing::rank_pid(tag, 1);
  }
  ASSERT_GT(victim, 0) << "rank 1 not found";
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  bool ended = false;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    if (::waitpid(child, &status, WNOHANG) == child) {
      ended = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!ended) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
  }
  ASSERT_TRUE(ended) << "the job did not end within 60 s of rank 1's death";
  EXPECT_LT(secs, 10) << "seconds from the kill to the end of the job";
  EXPECT_NE(WEXITSTATUS(status), 0);
  const std::string err = testing::read_file(tmp.file("err"));
  EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
  EXPECT_EQ(testing::rank_pid(tag, 0), -1) << "rank 0 outlived the job";
  EXPECT_EQ(testing::rank_pid(tag, 2), -1) << "rank 2 outlived the job";
  std::printf("[measured] rank 1 killed: the job ended %.2f s later\n", secs);
}

}  // namespace
}  // namespace k3
