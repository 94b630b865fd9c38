// `k3 serve` driven from Node: the official `openai` npm client (js/openai_test.mjs: chat
// non-stream and stream, reasoning split, usage, a tool-call round trip, completions, models,
// images, and error statuses as APIError) and a headless Debian Chromium through playwright-core
// (js/browser_test.mjs: the chat page streams a reply, two turns; the image button's label, the
// favicon, and the API-key field on a server with and without --api-key).  Needs node, the npm packages
// (scripts/install-test-deps.sh) and /usr/bin/chromium; without them the tests skip, or fail when
// K3_REQUIRE_NODE_TESTS=1.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "server_test_util.h"
#include "support/test_support.h"

namespace k3::testing {
namespace {

const std::string kJsDir = K3_SERVER_JS_DIR;

// Why the node tests cannot run here ("" when they can).
std::string missing_node_deps(bool browser) {
  if (std::system("node --version >/dev/null 2>&1") != 0) return "node is not installed";
  for (const char* pkg : {"openai", "playwright-core"})
    if (!std::filesystem::exists(kJsDir + "/node_modules/" + pkg + "/package.json"))
      return std::string("the npm package ") + pkg + " is not installed in " + kJsDir +
             " (run scripts/install-test-deps.sh)";
  if (browser && !std::filesystem::exists("/usr/bin/chromium")) return "/usr/bin/chromium is not installed";
  return "";
}

#define REQUIRE_NODE(browser)                                                         \
  do {                                                                                \
    const std::string why = missing_node_deps(browser);                               \
    if (!why.empty()) {                                                               \
      const char* req = std::getenv("K3_REQUIRE_NODE_TESTS");                         \
      if (req && std::string(req) == "1") FAIL() << "K3_REQUIRE_NODE_TESTS=1: " << why; \
      GTEST_SKIP() << why;                                                            \
    }                                                                                 \
  } while (0)

// Runs `node script args...` in the js folder; returns the exit code and the output.
int run_node(const std::string& script, const std::string& args, std::string* output) {
  TempDir tmp;
  const std::string cmd = "cd " + kJsDir + " && node " + script + " " + args + " >" + tmp.file("out") + " 2>&1";
  const int status = std::system(cmd.c_str());
  *output = read_file(tmp.file("out"));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

TEST(ServerJs, OfficialOpenAiClient) {
  REQUIRE_NODE(false);
  ServerProcess s({"--model", vision_model_dir(), "--served-model-name", "m", "--ctx", "512"});
  TempDir tmp;
  write_png(tmp.file("img.png"), 36, 30, 3);
  std::string out;
  const int rc = run_node("openai_test.mjs", s.base_url() + " " + tmp.file("img.png"), &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("openai client: all checks passed"), std::string::npos) << out;
}

TEST(ServerJs, ChatPageInHeadlessChromium) {
  REQUIRE_NODE(true);
  ServerProcess s({"--model", plain_model_dir(), "--served-model-name", "m"});
  std::string out;
  const int rc = run_node("browser_test.mjs", s.base_url(), &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("browser: all checks passed"), std::string::npos) << out;
}

// The page asks for the key of a server started with --api-key, and sends it.
TEST(ServerJs, ChatPageWithApiKeyInHeadlessChromium) {
  REQUIRE_NODE(true);
  ServerProcess s({"--model", plain_model_dir(), "--served-model-name", "m", "--api-key", "sesame"});
  std::string out;
  const int rc = run_node("browser_test.mjs", s.base_url() + " sesame", &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("browser: all checks passed"), std::string::npos) << out;
}

}  // namespace
}  // namespace k3::testing
