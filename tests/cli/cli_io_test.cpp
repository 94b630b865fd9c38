// The `k3` executable's own input and output: stdout that cannot be written is an error (exit 1,
// never a silent exit 0 with the output lost), stdin and config files that cannot be read say
// why, and --out paths that are empty, directories, symlinks or devices are handled safely.
#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>

#include "base/cpu_features.h"
#include "base/error.h"
#include "support/test_support.h"

namespace k3 {
namespace {

using testing::list_dir;
using testing::TempDir;

std::string fixture() { return testing::fixture_dir("k3-tiny-a"); }
std::string tiktoken() {
  return "--tiktoken " + testing::fixture_dir("tokenizer") + "/cl100k_base.tiktoken --pattern cl100k";
}

// Runs `k3 <args>` through /bin/sh with stdin from /dev/null and stdout/stderr captured, then
// `redirects` (sh applies redirections left to right, so these replace the defaults: "<dir",
// ">/dev/full").
testing::CommandResult run_shell(const std::string& args, const std::string& redirects) {
  TempDir tmp;
  const std::string out = tmp.file("stdout"), err = tmp.file("stderr");
  const std::string line = testing::k3_binary() + " " + args + " </dev/null >" + out + " 2>" + err + " " + redirects;
  const int status = std::system(line.c_str());
  testing::CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = testing::read_file(out);
  r.err = testing::read_file(err);
  return r;
}

bool dev_full_is_a_device() {
  struct stat st {};
  return ::lstat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode);
}

// `k3 generate > /dev/full` used to exit 0 with every token lost.  (Only a shell redirect opens
// /dev/full here: nothing is ever written *over* it.)
TEST(CliIo, StdoutThatCannotBeWrittenIsAnError) {
  if (!dev_full_is_a_device()) GTEST_SKIP() << "/dev/full is not a character device here";
  for (const std::string& args : {"generate --model " + fixture() + " --prompt-ids 1,2 --max-tokens 3",
                                 "inspect " + fixture(), std::string("--help")}) {
    SCOPED_TRACE(args);
    const testing::CommandResult r = run_shell(args, ">/dev/full");
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("k3: error: cannot write stdout: No space left on device"), std::string::npos) << r.err;
  }
  EXPECT_TRUE(dev_full_is_a_device());
}

// stdin redirected from a directory: tokenize printed [] (exit 0) and detokenize "unexpected end
// of input"; the read error itself is the message now.
TEST(CliIo, StdinThatCannotBeReadIsAnError) {
  TempDir tmp;
  for (const char* cmd : {"tokenize ", "detokenize "}) {
    SCOPED_TRACE(cmd);
    const testing::CommandResult r = run_shell(cmd + tiktoken(), "<" + tmp.path());
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find("k3: error: cannot read stdin: Is a directory"), std::string::npos) << r.err;
  }
  // The ordinary path still works.
  const testing::CommandResult ok = testing::run_k3("tokenize " + tiktoken(), "hello world");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.out, "[15339,1917]\n");
}

// `k3 chat` reads stdin through std::cin: a read error ended the chat like end of input, exit 0
// with nothing said.
TEST(CliIo, ChatStdinThatCannotBeReadIsAnError) {
  TempDir tmp;
  const testing::CommandResult synth =
      testing::run_k3("synth --preset tiny --layers 1 --experts 2 --top-k 1 --no-vision --out " + tmp.file("m"));
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  const std::string chat = "chat --model " + tmp.file("m") + " --no-think --max-tokens 1";
  const testing::CommandResult r = run_shell(chat, "<" + tmp.path());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("k3: error: could not read the chat input from stdin: Is a directory"), std::string::npos)
      << r.err;
  // End of input is still a normal end.
  const testing::CommandResult eof = run_shell(chat, "");
  EXPECT_EQ(eof.exit_code, 0) << eof.err;
  EXPECT_EQ(eof.err, "");
}

// A misspelt K3_LOG meant "warn" without a word, and K3_ISA above what the CPU offers silently
// ran something else.
TEST(CliIo, EnvironmentSettingsThatCannotBeHonouredAreTold) {
  testing::CommandResult r = run_shell("inspect " + fixture(), "");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  // generate, so the kernels (and with them the instruction set) are chosen.
  const std::string generate = testing::k3_binary() + " generate --prompt-ids 1,2 --max-tokens 1 --model " + fixture();
  TempDir tmp;
  const auto run_env = [&](const std::string& env) {
    const std::string line = env + " " + generate + " </dev/null >/dev/null 2>" + tmp.file("err");
    const int status = std::system(line.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << env;
    return testing::read_file(tmp.file("err"));
  };
  EXPECT_NE(run_env("K3_LOG=verbose").find("k3 warn: K3_LOG='verbose' is not error, warn, info or debug; using warn"),
            std::string::npos);
  EXPECT_EQ(run_env("K3_LOG=warn"), "");
  EXPECT_EQ(run_env("K3_LOG=error"), "");
  EXPECT_EQ(run_env("K3_ISA=ref"), "");
  if (best_isa() < Isa::kAmx) {
    const std::string err = run_env("K3_ISA=amx");
    EXPECT_NE(err.find(cat("K3_ISA=amx: this CPU cannot run amx; using ", isa_name(best_isa()))),
              std::string::npos)
        << err;
  }
}

// Every reason a config.json cannot be read is named (they were all "config.json: cannot open",
// and a directory was "not valid JSON").
TEST(CliIo, ConfigThatCannotBeReadSaysWhy) {
  TempDir tmp;
  testing::write_file(tmp.file("afile"), "x");
  const std::string m = tmp.file("m");
  testing::copy_dir(fixture(), m);
  ASSERT_EQ(::unlink((m + "/config.json").c_str()), 0);
  ASSERT_EQ(::mkdir((m + "/config.json").c_str(), 0755), 0);
  const std::string loop = tmp.file("loop");
  testing::copy_dir(fixture(), loop);
  ASSERT_EQ(::unlink((loop + "/config.json").c_str()), 0);
  ASSERT_EQ(::symlink("config.json", (loop + "/config.json").c_str()), 0);

  struct Case {
    std::string model, expect;
  };
  const Case cases[] = {
      {m, "config.json: cannot read: is a directory"},
      {loop, "config.json: cannot open: Too many levels of symbolic links"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model);
    const testing::CommandResult r = testing::run_k3("generate --prompt-ids 1,2 --max-tokens 2 --model " + c.model);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
  }
  // --model naming a file: whatever step notices first, the message says it is not a directory.
  const testing::CommandResult r = testing::run_k3("generate --prompt-ids 1,2 --max-tokens 2 --model " + tmp.file("afile"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("ot a directory"), std::string::npos) << r.err;
}

// k3's cache folder (where `k3 bench` keeps its full-width checkpoint, and the built-in model
// would be made were the shipped one missing) that cannot be created or written, and a HOME that
// does not exist, are named before anything is measured or written.
TEST(CliIo, CacheFolderThatCannotBeUsedSaysWhy) {
  TempDir tmp;
  testing::write_file(tmp.file("plain"), "x");
  const auto run_env = [&](const std::string& env) {
    // (timeout: were a folder wrongly accepted, bench would start writing its 16 GB checkpoint)
    const std::string line = "timeout 60 env -u XDG_CACHE_HOME " + env + " " + testing::k3_binary() +
                             " bench --no-kernels </dev/null >/dev/null 2>" + tmp.file("err");
    const int status = std::system(line.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << env;
    return testing::read_file(tmp.file("err"));
  };
  std::string err = run_env("XDG_CACHE_HOME=" + tmp.file("plain"));
  EXPECT_NE(err.find("k3: error: cannot create k3's cache folder " + tmp.file("plain") +
                     "/k3 (from XDG_CACHE_HOME): Not a directory; set XDG_CACHE_HOME to a writable folder"),
            std::string::npos)
      << err;
  err = run_env("HOME=" + tmp.file("nowhere"));
  EXPECT_NE(err.find("k3: error: HOME=" + tmp.file("nowhere") + " is not a directory, so k3 has no cache folder"),
            std::string::npos)
      << err;
  // Root writes into read-only folders: as root, k3 runs as nobody (setpriv, util-linux) when it can.
  std::string as_user;
  if (::geteuid() == 0) {
    ASSERT_EQ(::chmod(tmp.path().c_str(), 0755), 0);
    as_user = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
    const std::string probe = as_user + testing::k3_binary() + " --help >/dev/null 2>&1";
    if (std::system(probe.c_str()) != 0) GTEST_SKIP() << "the read-only cases need k3 to run as another user";
  }
  ASSERT_EQ(::mkdir(tmp.file("ro").c_str(), 0555), 0);
  err = run_env("XDG_CACHE_HOME=" + tmp.file("ro") + " " + as_user);
  EXPECT_NE(err.find("cannot create k3's cache folder " + tmp.file("ro") + "/k3 (from XDG_CACHE_HOME): Permission denied"),
            std::string::npos)
      << err;
  ASSERT_EQ(::mkdir(tmp.file("home").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(tmp.file("home/.cache").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(tmp.file("home/.cache/k3").c_str(), 0555), 0);
  err = run_env("HOME=" + tmp.file("home") + " " + as_user);
  EXPECT_NE(err.find("k3's cache folder " + tmp.file("home") + "/.cache/k3 (from HOME) is not writable: Permission denied"),
            std::string::npos)
      << err;
}

// logits --out: an empty name and a directory are refused before any work, and leave nothing
// behind; a symlink stays a symlink; a user's own "<name>.tmp" survives.
TEST(CliIo, LogitsOutPathsAreHandledSafely) {
  TempDir tmp;
  const std::string base = "logits --model " + fixture() + " --prompt-ids 1,2,3 --out ";
  ASSERT_EQ(::mkdir(tmp.file("dir").c_str(), 0755), 0);

  testing::CommandResult r = testing::run_k3(base + "''");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("output path is empty"), std::string::npos) << r.err;

  r = testing::run_k3(base + tmp.file("dir"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find(tmp.file("dir") + ": is a directory"), std::string::npos) << r.err;
  EXPECT_EQ(list_dir(tmp.path()), (std::set<std::string>{"dir"}));

  testing::write_file(tmp.file("real.st"), "old");
  testing::write_file(tmp.file("link.st.tmp"), "mine");
  ASSERT_EQ(::symlink("real.st", tmp.file("link.st").c_str()), 0);
  r = testing::run_k3(base + tmp.file("link.st"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  struct stat st {};
  ASSERT_EQ(::lstat(tmp.file("link.st").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  SafetensorsFile out(tmp.file("real.st"));
  EXPECT_NE(out.find("logits"), nullptr);
  EXPECT_EQ(testing::read_file(tmp.file("link.st.tmp")), "mine");
  EXPECT_EQ(list_dir(tmp.path()), (std::set<std::string>{"dir", "real.st", "link.st", "link.st.tmp"}));
}

}  // namespace
}  // namespace k3
