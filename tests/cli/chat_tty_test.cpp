// `k3 chat` on a real terminal, a tmux pane: Ctrl-C stops a reply and keeps the session, the
// prompt has line editing and history, and Ctrl-C or Ctrl-D at the prompt leaves on a new line.
// Needs tmux (Debian package `tmux`): skipped without it, unless K3_REQUIRE_NODE_TESTS=1.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "support/test_support.h"

namespace k3 {
namespace {

using testing::run_k3;
using testing::TempDir;

bool tmux_missing() { return std::system("command -v tmux >/dev/null 2>&1") != 0; }

bool required() {
  const char* v = std::getenv("K3_REQUIRE_NODE_TESTS");
  return v != nullptr && std::string(v) == "1";
}

#define SKIP_WITHOUT_TMUX()                                                                               \
  do {                                                                                                    \
    if (tmux_missing()) {                                                                                 \
      if (required()) FAIL() << "tmux is not installed, and K3_REQUIRE_NODE_TESTS=1 requires this test";  \
      GTEST_SKIP() << "tmux is not installed (apt-get install tmux); the terminal chat test needs it";    \
    }                                                                                                     \
  } while (0)

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A tmux server of its own (socket in a temporary directory) running `command` in one pane;
// after the command its exit status is printed as "k3 exited with N" on a line of its own.
class Pane {
 public:
  explicit Pane(const std::string& command) : socket_(dir_.file("tmux.sock")) {
    const std::string shell = command + "; echo \"k3 exited with $?\"; sleep 600";
    tmux("-f /dev/null new-session -d -x 150 -y 40 " + shell_quote(shell));
  }
  ~Pane() { tmux("kill-server"); }

  // The pane's text, scrollback included.
  std::string screen() { return tmux("capture-pane -p -J -S - -t 0"); }
  void keys(const std::string& keys) { tmux("send-keys -t 0 " + keys); }
  // Polls the screen until `ok` holds (true) or `seconds` pass (false).
  bool wait_for(const std::function<bool(const std::string&)>& ok, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      if (ok(screen())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  // Polls until the last line is the chat's prompt.
  bool wait_for_prompt(double seconds) {
    return wait_for([](const std::string& s) { return last_line(s) == ">"; }, seconds);
  }
  // Polls until the command has ended; true when it exited with status 0.
  bool exits_cleanly(double seconds) {
    return wait_for_text("k3 exited", seconds) && screen().find("\nk3 exited with 0\n") != std::string::npos;
  }
  bool wait_for_text(const std::string& text, double seconds, int times = 1) {
    return wait_for([&](const std::string& s) { return count(s, text) >= times; }, seconds);
  }
  static int count(const std::string& s, const std::string& text) {
    int n = 0;
    for (size_t at = s.find(text); at != std::string::npos; at = s.find(text, at + 1)) ++n;
    return n;
  }
  // The last non-empty line, without trailing spaces (the prompt "> " reads ">").
  static std::string last_line(const std::string& s) {
    std::istringstream in(s);
    std::string line, last;
    while (std::getline(in, line)) {
      while (!line.empty() && line.back() == ' ') line.pop_back();
      if (!line.empty()) last = line;
    }
    return last;
  }

 private:
  std::string tmux(const std::string& args) {
    const std::string cmd = "tmux -S " + shell_quote(socket_) + " " + args + " 2>/dev/null";
    std::string out;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[4096];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
      ::pclose(p);
    }
    return out;
  }

  TempDir dir_;
  std::string socket_;
};

// A synthetic model whose replies run long: a context of 65536 tokens and replies of up to 60000
// tokens, so a Ctrl-C lands while one is being written.  (Its greedy reply to "abc" runs for
// thousands of tokens before the random weights pick an end-of-message token.)
const std::string& chat_model() {
  static TempDir dir;
  static const std::string model = [] {
    const std::string m = dir.file("chat");
    const auto r = run_k3("synth --preset tiny --no-vision --out " + m +
                          " --overrides '{\"max_position_embeddings\": 65536}'");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return m;
  }();
  return model;
}

std::string chat_command(const TempDir& home, const std::string& extra = "") {
  // HOME of its own: no ~/.editrc of the user's changes the keys.
  return "env HOME=" + home.path() + " " + testing::k3_binary() + " chat --model " + chat_model() + extra;
}

TEST(ChatTty, CtrlCStopsTheReplyAndKeepsTheSession) {
  SKIP_WITHOUT_TMUX();
  TempDir home;
  Pane pane(chat_command(home, " --max-tokens 60000"));
  ASSERT_TRUE(pane.wait_for([](const std::string& s) { return s.find("k3 chat with") != std::string::npos &&
                                                              Pane::last_line(s) == ">"; },
                            60))
      << pane.screen();
  pane.keys("abc Enter");
  // The reply is being written: text after the message's line.
  ASSERT_TRUE(pane.wait_for(
      [](const std::string& s) {
        const size_t at = s.find("> abc\n");
        return at != std::string::npos && s.find_first_not_of(" \n", at + 6) != std::string::npos;
      },
      60))
      << pane.screen();
  pane.keys("C-c");
  ASSERT_TRUE(pane.wait_for_text("(stopped; the conversation is as it was before this message)", 30)) << pane.screen();
  ASSERT_TRUE(pane.wait_for_prompt(10)) << pane.screen();
  EXPECT_EQ(pane.screen().find("k3 exited"), std::string::npos) << pane.screen();

  // History: Up brings back the last line entered.
  pane.keys("/reset Enter");
  ASSERT_TRUE(pane.wait_for_text("(conversation cleared)", 10)) << pane.screen();
  pane.keys("Up Enter");
  ASSERT_TRUE(pane.wait_for_text("(conversation cleared)", 10, 2)) << pane.screen();

  // Ctrl-C at the prompt leaves, on a line of its own, with status 0.
  ASSERT_TRUE(pane.wait_for_prompt(10)) << pane.screen();
  pane.keys("C-c");
  EXPECT_TRUE(pane.exits_cleanly(10)) << pane.screen();
}

TEST(ChatTty, LineEditingAndCtrlDAtThePrompt) {
  SKIP_WITHOUT_TMUX();
  TempDir home;
  Pane pane(chat_command(home));
  ASSERT_TRUE(pane.wait_for_prompt(60)) << pane.screen();
  // "help", then Ctrl-A (start of line) and "/": the command /help (the banner says it once).
  pane.keys("help C-a / Enter");
  ASSERT_TRUE(pane.wait_for_text("commands: /image PATH", 10, 2)) << pane.screen();
  ASSERT_TRUE(pane.wait_for_prompt(10)) << pane.screen();
  pane.keys("C-d");
  EXPECT_TRUE(pane.exits_cleanly(10)) << pane.screen();
}

}  // namespace
}  // namespace k3
