// The tools a model uses inside a sandbox, as OpenAI function tools: their JSON schemas for the
// request's `tools`, and the execution of a call against a Sandbox.
//
//   bash         {command, timeout}          runs `command` in /workspace (sh -c via the sandbox);
//                                            exit code, stdout and stderr (head + tail past a cap)
//   read_file    {path, offset, limit}       a text file, or a range of its lines; binary refused
//   write_file   {path, content}             creates or replaces a file, parent folders included
//   list_dir     {path}                      a folder's entries (default /workspace)
//   str_replace  {path, old_str, new_str}    replaces old_str, which must occur exactly once
//
// A call's arguments arrive as the JSON text the model wrote, so anything may be wrong with them
// (not JSON, not an object, a missing, unknown or mistyped field): every such problem, and every
// failure of the sandbox, becomes a result whose text starts "error: " and says what to fix, for
// the model to read; nothing throws out of call().  Paths are resolved by the sandbox's own file
// calls, which keep every path (`..`, absolute, symlinks) inside the sandbox.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "agentenv/sandbox.h"

namespace k3::agentenv {

struct ToolLimits {
  double default_timeout_s = 120;   // bash without a timeout
  double max_timeout_s = 600;       // the largest timeout bash accepts
  size_t output_cap = 32 << 10;     // bash: bytes shown per stream (its first and last half)
  size_t max_read = 256 << 10;      // read_file: bytes shown at most (whole lines)
  uint64_t max_file = 8ull << 20;   // read_file, str_replace: larger files are refused
  uint64_t max_write = 8ull << 20;  // write_file, str_replace: the largest content written
  size_t max_entries = 1000;        // list_dir: entries shown at most
};

struct ToolResult {
  std::string content;    // the tool message's text (valid UTF-8)
  bool is_error = false;  // the call did not do its work; content starts "error: "
};

class ToolSet {
 public:
  // `sandbox` may be null: every call is then checked and answered "error: no sandbox" (the
  // argument checks need no sandbox).
  explicit ToolSet(Sandbox* sandbox, ToolLimits limits = {});

  // The OpenAI `tools` array: [{"type": "function", "function": {name, description, parameters}}].
  nlohmann::ordered_json definitions() const;

  // Runs tool `name` with `arguments`, the JSON text of the call's function.arguments ("" is
  // taken as {}).  Never throws.
  ToolResult call(const std::string& name, const std::string& arguments);

  // Commands started after this time point are refused, and bash timeouts are cut to end by it
  // (the agent's time limit).
  void set_deadline(std::chrono::steady_clock::time_point deadline) { deadline_ = deadline; }

  const ToolLimits& limits() const { return limits_; }

 private:
  ToolResult bash(const nlohmann::ordered_json& args);
  ToolResult read_file(const nlohmann::ordered_json& args);
  ToolResult write_file(const nlohmann::ordered_json& args);
  ToolResult list_dir(const nlohmann::ordered_json& args);
  ToolResult str_replace(const nlohmann::ordered_json& args);
  // The file's text for read_file and str_replace; throws k3::Error saying why it is not text.
  std::string read_text(const std::string& path) const;

  Sandbox* sandbox_;
  ToolLimits limits_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
};

// `text` as one sh word: in single quotes, each ' written as '\''.
std::string shell_quote(std::string_view text);
// `text` with every byte sequence that is not UTF-8 replaced by U+FFFD, so it can go into JSON.
std::string valid_utf8(std::string_view text);

}  // namespace k3::agentenv
