// The model's tools (src/agentenv/tools.h): their definitions, the checks of a call's arguments
// (no sandbox needed), and each tool against a real sandbox: files, str_replace, bash with its
// timeout and output cap, and paths that try to leave the sandbox.
#include "agentenv/tools.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "agentenv/sandbox_test_util.h"

namespace k3::testing {
namespace {

using agentenv::ToolLimits;
using agentenv::ToolResult;
using agentenv::ToolSet;

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// The result of a call that must fail, checked to start "error: " and to hold `part`.
void expect_error(ToolSet& tools, const std::string& name, const std::string& args, const std::string& part) {
  const ToolResult r = tools.call(name, args);
  EXPECT_TRUE(r.is_error) << name << " " << args << " -> " << r.content;
  EXPECT_TRUE(starts_with(r.content, "error: ")) << r.content;
  EXPECT_NE(r.content.find(part), std::string::npos) << name << " " << args << " -> " << r.content;
}

TEST(Tools, DefinitionsAreOpenAIFunctionTools) {
  ToolSet tools(nullptr);
  const nlohmann::ordered_json defs = tools.definitions();
  ASSERT_TRUE(defs.is_array());
  std::vector<std::string> names;
  for (const auto& d : defs) {
    EXPECT_EQ(d["type"], "function");
    const auto& fn = d["function"];
    names.push_back(fn["name"].get<std::string>());
    EXPECT_TRUE(fn["description"].is_string() && !fn["description"].get<std::string>().empty());
    const auto& p = fn["parameters"];
    EXPECT_EQ(p["type"], "object");
    EXPECT_TRUE(p["properties"].is_object());
    EXPECT_EQ(p["additionalProperties"], false);
    for (const auto& r : p["required"]) EXPECT_TRUE(p["properties"].contains(r.get<std::string>())) << r;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"bash", "read_file", "write_file", "list_dir", "str_replace"}));
}

TEST(Tools, BadArgumentsAreErrorResults) {
  ToolSet tools(nullptr);
  expect_error(tools, "rm_rf", "{}", "there is no tool named 'rm_rf' (the tools: bash, read_file, write_file");
  expect_error(tools, "bash", "{\"command\": ", "the arguments of bash are not valid JSON: ");
  expect_error(tools, "bash", "ls -la", "not valid JSON");
  expect_error(tools, "bash", "[1, 2]", "the arguments of bash must be a JSON object (got an array)");
  expect_error(tools, "bash", "\"ls\"", "must be a JSON object (got a string)");
  expect_error(tools, "bash", "{}", "bash needs the argument 'command' (string)");
  expect_error(tools, "bash", "{\"command\": null}", "bash needs the argument 'command'");
  expect_error(tools, "bash", R"({"command": "ls", "cwd": "/"})",
               "bash has no argument 'cwd' (its arguments: command, timeout)");
  expect_error(tools, "bash", R"({"command": 5})", "bash: 'command' must be a string (got a number)");
  expect_error(tools, "bash", R"({"command": ["ls"]})", "'command' must be a string (got an array)");
  expect_error(tools, "bash", R"({"command": "ls", "timeout": "10"})", "'timeout' must be a number (got a string)");
  expect_error(tools, "bash", R"({"command": "ls", "timeout": 0})", "'timeout' must be more than 0 and at most 600");
  expect_error(tools, "bash", R"({"command": "ls", "timeout": 601})", "(got 601)");
  expect_error(tools, "bash", R"({"command": "ls", "timeout": -1})", "(got -1)");
  expect_error(tools, "bash", R"({"command": "  "})", "bash: 'command' is empty");
  expect_error(tools, "bash", R"({"command": "echo \u0000"})", "NUL");
  expect_error(tools, "read_file", "{}", "read_file needs the argument 'path' (string)");
  expect_error(tools, "read_file", R"({"path": "a", "offset": 1.5})",
               "'offset' must be an integer (got a number with a fraction)");
  expect_error(tools, "read_file", R"({"path": "a", "offset": 0})", "'offset' counts lines from 1 (got 0)");
  expect_error(tools, "read_file", R"({"path": "a", "limit": 0})", "'limit' must be at least 1 line (got 0)");
  expect_error(tools, "read_file", R"({"path": "a", "limit": true})", "'limit' must be an integer (got a boolean)");
  expect_error(tools, "write_file", R"({"path": "a"})", "write_file needs the argument 'content' (string)");
  expect_error(tools, "write_file", R"({"path": "a", "content": {}})", "'content' must be a string (got an object)");
  expect_error(tools, "list_dir", R"({"dir": "/"})", "list_dir has no argument 'dir' (its arguments: path)");
  expect_error(tools, "str_replace", R"({"path": "a", "old_str": "x"})", "str_replace needs the argument 'new_str'");
  expect_error(tools, "str_replace", R"({"path": "a", "old_str": "", "new_str": "y"})", "'old_str' is empty");
  // Arguments that pass the checks still need a sandbox.
  expect_error(tools, "list_dir", "", "no sandbox");
  expect_error(tools, "read_file", R"({"path": "a", "offset": 2.0, "limit": null})", "no sandbox");
  ToolLimits small;
  small.max_write = 4;
  ToolSet limited(nullptr, small);
  expect_error(limited, "write_file", R"({"path": "a", "content": "12345"})",
               "the content is 5 bytes; at most 4 bytes");
}

TEST(Tools, ValidUtf8AndShellQuote) {
  EXPECT_EQ(agentenv::valid_utf8("plain é ✓"), "plain é ✓");
  EXPECT_EQ(agentenv::valid_utf8("a\xff"
                                 "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(agentenv::valid_utf8("\xC3"), "\xEF\xBF\xBD");                                  // cut sequence
  EXPECT_EQ(agentenv::valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong
  EXPECT_EQ(agentenv::valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(agentenv::shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(agentenv::shell_quote(""), "''");
}

struct SandboxTools {
  ScratchManager manager;
  std::shared_ptr<agentenv::Sandbox> sandbox;
  explicit SandboxTools(ToolLimits limits = {}) : sandbox(manager->create({})), tools(sandbox.get(), limits) {}
  ToolSet tools;
  std::string ok(const std::string& name, const nlohmann::ordered_json& args) {
    const ToolResult r = tools.call(name, args.dump());
    EXPECT_FALSE(r.is_error) << name << " " << args.dump() << " -> " << r.content;
    return r.content;
  }
};

TEST(ToolsInSandbox, WriteReadListAndReplace) {
  K3_REQUIRE_SANDBOXES();
  SandboxTools s;
  EXPECT_EQ(s.ok("write_file", {{"path", "notes/a.txt"}, {"content", "one\ntwo\n"}}),
            "wrote 8 bytes to /workspace/notes/a.txt");
  EXPECT_EQ(s.ok("read_file", {{"path", "/workspace/notes/a.txt"}}), "one\ntwo\n");
  EXPECT_EQ(s.sandbox->read_file("/workspace/notes/a.txt"), "one\ntwo\n");
  s.ok("write_file", {{"path", "/workspace/empty"}, {"content", ""}});
  EXPECT_EQ(s.ok("read_file", {{"path", "empty"}}), "(the file is empty)");

  std::string lines;
  for (int i = 1; i <= 10; ++i) lines += "line" + std::to_string(i) + "\n";
  s.ok("write_file", {{"path", "ten.txt"}, {"content", lines}});
  EXPECT_EQ(s.ok("read_file", {{"path", "ten.txt"}, {"offset", 3}, {"limit", 2}}),
            "line3\nline4\n[lines 3-4 of 10 shown; continue with offset 5]");
  EXPECT_EQ(s.ok("read_file", {{"path", "ten.txt"}, {"offset", 9}}), "line9\nline10\n[lines 9-10 of 10 shown]");
  expect_error(s.tools, "read_file", R"({"path": "ten.txt", "offset": 11})",
               "'offset' 11 is past the end of /workspace/ten.txt (it has 10 lines)");
  expect_error(s.tools, "read_file", R"({"path": "missing.txt"})", "missing.txt");

  const std::string listing = s.ok("list_dir", nlohmann::ordered_json::object());
  EXPECT_NE(listing.find("/workspace: "), std::string::npos) << listing;
  EXPECT_NE(listing.find("notes/\n"), std::string::npos) << listing;
  EXPECT_NE(listing.find("ten.txt  (61 bytes)\n"), std::string::npos) << listing;
  EXPECT_NE(s.ok("list_dir", {{"path", "notes"}}).find("a.txt  (8 bytes)"), std::string::npos);
  expect_error(s.tools, "list_dir", R"({"path": "nowhere"})", "nowhere");

  s.ok("write_file", {{"path", "code.sh"}, {"content", "x=1\ny=1\nz=2\n"}});
  expect_error(s.tools, "str_replace", R"({"path": "code.sh", "old_str": "=1", "new_str": "=3"})",
               "'old_str' occurs 2 times in /workspace/code.sh; it must occur exactly once");
  expect_error(s.tools, "str_replace", R"({"path": "code.sh", "old_str": "w=1", "new_str": "=3"})",
               "'old_str' does not occur in /workspace/code.sh");
  expect_error(s.tools, "str_replace", R"({"path": "none.sh", "old_str": "a", "new_str": "b"})", "none.sh");
  EXPECT_EQ(s.ok("str_replace", {{"path", "code.sh"}, {"old_str", "y=1"}, {"new_str", "y=5"}}),
            "replaced 1 occurrence in /workspace/code.sh (at line 2)");
  EXPECT_EQ(s.sandbox->read_file("code.sh"), "x=1\ny=5\nz=2\n");
  // Overlapping matches are two.
  s.ok("write_file", {{"path", "aaa"}, {"content", "aaa"}});
  expect_error(s.tools, "str_replace", R"({"path": "aaa", "old_str": "aa", "new_str": "b"})", "occurs 2 times");
}

TEST(ToolsInSandbox, ReadFileRefusesBinaryAndCapsText) {
  K3_REQUIRE_SANDBOXES();
  ToolLimits limits;
  limits.max_read = 100;
  limits.max_file = 4096;
  SandboxTools s(limits);
  s.sandbox->write_file("bin", std::string("ab\0cd", 5));
  expect_error(s.tools, "read_file", R"({"path": "bin"})", "/workspace/bin is not a text file (it holds NUL bytes)");
  expect_error(s.tools, "str_replace", R"({"path": "bin", "old_str": "a", "new_str": "b"})", "not a text file");
  s.sandbox->write_file("latin1", "caf\xe9\n");
  expect_error(s.tools, "read_file", R"({"path": "latin1"})", "/workspace/latin1 is not UTF-8 text (byte 3");
  s.sandbox->write_file("big", std::string(5000, 'x'));
  expect_error(s.tools, "read_file", R"({"path": "big"})", "big");  // over max_file: the sandbox refuses it

  std::string lines;
  for (int i = 0; i < 50; ++i) lines += "123456789\n";  // 10 bytes a line
  s.sandbox->write_file("fifty", lines);
  const std::string r = s.ok("read_file", {{"path", "fifty"}});
  EXPECT_TRUE(starts_with(r, lines.substr(0, 100) + "[lines 1-10 of 50 shown")) << r;
  EXPECT_NE(r.find("[lines 1-10 of 50 shown; continue with offset 11]"), std::string::npos) << r;
  s.sandbox->write_file("long", std::string(300, 'y') + "\nshort\n");
  const std::string cut = s.ok("read_file", {{"path", "long"}});
  EXPECT_TRUE(starts_with(cut, std::string(100, 'y') + "\n[line 1 is longer than 100 bytes")) << cut;
}

TEST(ToolsInSandbox, BashRunsInWorkspaceWithBashSyntax) {
  K3_REQUIRE_SANDBOXES();
  SandboxTools s;
  EXPECT_EQ(s.ok("bash", {{"command", "pwd"}}), "exit code: 0\nstdout:\n/workspace\n");
  EXPECT_EQ(s.ok("bash", {{"command", "echo out; echo err >&2; exit 3"}}),
            "exit code: 3\nstdout:\nout\nstderr:\nerr\n");
  EXPECT_EQ(s.ok("bash", {{"command", "[[ 2 -gt 1 ]] && echo 'it'\"'\"'s bash'"}}),
            "exit code: 0\nstdout:\nit's bash\n");
  EXPECT_EQ(s.ok("bash", {{"command", "true"}}), "exit code: 0\n(no output)\n");
  s.ok("bash", {{"command", "echo made > made.txt"}});
  EXPECT_EQ(s.sandbox->read_file("/workspace/made.txt"), "made\n");
}

TEST(ToolsInSandbox, BashTimeoutAndOutputCap) {
  K3_REQUIRE_SANDBOXES();
  ToolLimits limits;
  limits.output_cap = 1024;
  SandboxTools s(limits);
  const auto start = std::chrono::steady_clock::now();
  const std::string slow = s.ok("bash", {{"command", "echo started; sleep 30"}, {"timeout", 1}});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
  EXPECT_TRUE(starts_with(slow, "timed out after 1 s: the command was killed\n")) << slow;

  const std::string loud = s.ok("bash", {{"command", "head -c 100000 /dev/zero | tr '\\0' a; echo END"}});
  EXPECT_NE(loud.find("[stdout was 97 KiB; only its first and last 512 bytes are shown]"), std::string::npos) << loud;
  EXPECT_LT(loud.size(), 2000u) << loud;
  EXPECT_NE(loud.find("END"), std::string::npos);  // the tail is kept

  // Past the agent's deadline nothing runs; close to it, the timeout is cut.
  s.tools.set_deadline(std::chrono::steady_clock::now() - std::chrono::seconds(1));
  expect_error(s.tools, "bash", R"({"command": "true"})", "the agent's time limit has passed");
  s.tools.set_deadline(std::chrono::steady_clock::now() + std::chrono::seconds(2));
  const std::string cut = s.ok("bash", {{"command", "sleep 30"}, {"timeout", 100}});
  EXPECT_NE(cut.find("(the agent's time limit)"), std::string::npos) << cut;
}

TEST(ToolsInSandbox, PathsStayInsideTheSandbox) {
  K3_REQUIRE_SANDBOXES();
  SandboxTools s;
  const std::string host_shadow = read_file("/etc/shadow");
  const std::string marker = "k3-tools-escape-" + std::to_string(getpid());
  for (const char* path : {"../../etc/shadow", "/../../../etc/shadow", "/etc/../../etc/shadow"}) {
    const ToolResult r = s.tools.call("read_file", nlohmann::ordered_json{{"path", path}}.dump());
    if (!host_shadow.empty()) {
      EXPECT_EQ(r.content.find(host_shadow), std::string::npos) << path;
    }
  }
  for (const std::string& path : {"../../tmp/" + marker, "/../../../tmp/" + marker}) {
    s.tools.call("write_file", nlohmann::ordered_json{{"path", path}, {"content", "x"}}.dump());
    EXPECT_FALSE(std::filesystem::exists("/tmp/" + marker)) << path;
  }
  s.tools.call("write_file", R"({"path": "../../etc/shadow", "content": "owned"})");
  EXPECT_EQ(read_file("/etc/shadow"), host_shadow);
  const ToolResult r = s.tools.call("bash", R"({"command": "cat /etc/shadow"})");
  if (!host_shadow.empty()) {
    EXPECT_EQ(r.content.find(host_shadow), std::string::npos);
  }
  std::filesystem::remove("/tmp/" + marker);
}

}  // namespace
}  // namespace k3::testing
