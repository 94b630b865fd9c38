#include "agentenv/tools.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <initializer_list>
#include <utility>
#include <vector>

#include "base/error.h"

namespace k3::agentenv {
namespace {

using tool_json = nlohmann::ordered_json;

ToolResult tool_error(const std::string& message) { return {"error: " + message, true}; }

// One argument of a tool: its JSON type ("string", "integer", "number") and whether it must be given.
struct ToolField {
  const char* name;
  const char* type;
  bool required;
};

const char* tool_type_name(const tool_json& v) {
  switch (v.type()) {
    case tool_json::value_t::null:
      return "null";
    case tool_json::value_t::boolean:
      return "a boolean";
    case tool_json::value_t::string:
      return "a string";
    case tool_json::value_t::array:
      return "an array";
    case tool_json::value_t::object:
      return "an object";
    case tool_json::value_t::number_float:
      return "a number with a fraction";
    default:
      return v.is_number() ? "a number" : "something else";
  }
}

bool tool_is_integer(const tool_json& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9e15;
}

// "" when `args` is an object whose fields are those of `fields` with the right types (null counts
// as absent); else what is wrong, naming the tool and the field.
std::string tool_check_fields(const std::string& tool, const tool_json& args, std::initializer_list<ToolField> fields) {
  std::string names;
  for (const ToolField& f : fields) names += (names.empty() ? "" : ", ") + std::string(f.name);
  if (!args.is_object())
    return cat("the arguments of ", tool, " must be a JSON object (got ", tool_type_name(args), ")");
  for (const auto& [key, value] : args.items()) {
    const bool known = std::any_of(fields.begin(), fields.end(), [&key](const ToolField& f) { return key == f.name; });
    if (!known) return cat(tool, " has no argument '", key, "' (its arguments: ", names, ")");
  }
  for (const ToolField& f : fields) {
    const bool given = args.contains(f.name) && !args[f.name].is_null();
    if (!given) {
      if (f.required) return cat(tool, " needs the argument '", f.name, "' (", f.type, ")");
      continue;
    }
    const tool_json& v = args[f.name];
    const std::string type = f.type;
    const bool ok = type == "string" ? v.is_string() : type == "integer" ? tool_is_integer(v) : v.is_number();
    if (!ok)
      return cat(tool, ": '", f.name, "' must be ", type == "integer" ? "an integer" : "a ",
                 type == "integer" ? "" : type, " (got ", tool_type_name(v), ")");
  }
  return "";
}

bool tool_given(const tool_json& args, const char* name) { return args.contains(name) && !args[name].is_null(); }

// How a sandbox path reads in messages: relative paths are relative to /workspace.
std::string tool_shown_path(const std::string& path) {
  if (!path.empty() && path.front() == '/') return path;
  return path.empty() ? std::string("/workspace") : "/workspace/" + path;
}

std::string tool_size_text(uint64_t bytes) {
  if (bytes < 10 * 1024) return cat(bytes, " bytes");
  if (bytes < 10 * 1024 * 1024) return cat(bytes / 1024, " KiB");
  return cat(bytes / (1024 * 1024), " MiB");
}

// The length of the longest prefix of `text` no longer than `n` bytes that does not end inside a
// UTF-8 sequence.
size_t tool_utf8_cut(std::string_view text, size_t n) {
  if (n >= text.size()) return text.size();
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return n;
}

// The byte offset of the first byte that is not part of valid UTF-8, or npos.
size_t tool_invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return i;
    }
    if (i + len > s.size()) return i;
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

// A stream of bash's output as shown to the model, with a note when part of it was dropped.
std::string tool_stream_text(const char* name, const std::string& text, uint64_t total, size_t cap) {
  std::string out = cat(name, ":\n", valid_utf8(text));
  if (!out.empty() && out.back() != '\n') out += '\n';
  if (total > cap)
    out += cat("[", name, " was ", tool_size_text(total), "; only its first and last ", tool_size_text(cap / 2),
               " are shown]\n");
  return out;
}

}  // namespace

std::string shell_quote(std::string_view text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const size_t bad = tool_invalid_utf8_at(text);
    if (bad == std::string_view::npos) {
      out.append(text);
      break;
    }
    out.append(text.substr(0, bad));
    out += "\xEF\xBF\xBD";
    text.remove_prefix(bad + 1);
  }
  return out;
}

ToolSet::ToolSet(Sandbox* sandbox, ToolLimits limits) : sandbox_(sandbox), limits_(limits) {}

tool_json ToolSet::definitions() const {
  const auto fn = [](const char* name, const std::string& description, tool_json properties,
                     std::vector<std::string> required) {
    tool_json params = {{"type", "object"},
                        {"properties", std::move(properties)},
                        {"required", required},
                        {"additionalProperties", false}};
    return tool_json{{"type", "function"},
                     {"function", {{"name", name}, {"description", description}, {"parameters", std::move(params)}}}};
  };
  const auto prop = [](const char* type, const std::string& description) {
    return tool_json{{"type", type}, {"description", description}};
  };
  tool_json tools = tool_json::array();
  tools.push_back(
      fn("bash",
         cat("Run a shell command (bash -c) in /workspace and return its exit code, stdout and stderr. "
             "Output past ",
             tool_size_text(limits_.output_cap), " per stream keeps only its start and end."),
         {{"command", prop("string", "The command to run.")},
          {"timeout", prop("number", cat("Seconds before the command is killed (default ", limits_.default_timeout_s,
                                         ", at most ", limits_.max_timeout_s, ")."))}},
         {"command"}));
  tools.push_back(fn("read_file",
                     cat("Read a text file. Relative paths are relative to /workspace. Shows at most ",
                         tool_size_text(limits_.max_read), "; use offset and limit for the rest."),
                     {{"path", prop("string", "The file's path.")},
                      {"offset", prop("integer", "The first line to show, counting from 1 (default 1).")},
                      {"limit", prop("integer", "How many lines to show (default: to the end).")}},
                     {"path"}));
  tools.push_back(
      fn("write_file", "Create or overwrite a file with the given content; missing parent folders are created.",
         {{"path", prop("string", "The file's path.")}, {"content", prop("string", "The whole new content.")}},
         {"path", "content"}));
  tools.push_back(fn("list_dir", "List a folder's entries: folders end with /, symlinks with @, files show their size.",
                     {{"path", prop("string", "The folder (default /workspace).")}}, {}));
  tools.push_back(fn("str_replace",
                     "Replace old_str with new_str in a text file. old_str must occur exactly once: include enough "
                     "surrounding text to make it unique.",
                     {{"path", prop("string", "The file's path.")},
                      {"old_str", prop("string", "The exact text to replace.")},
                      {"new_str", prop("string", "The text to put in its place.")}},
                     {"path", "old_str", "new_str"}));
  return tools;
}

ToolResult ToolSet::call(const std::string& name, const std::string& arguments) {
  using Method = ToolResult (ToolSet::*)(const tool_json&);
  static const std::pair<const char*, Method> kTools[] = {{"bash", &ToolSet::bash},
                                                          {"read_file", &ToolSet::read_file},
                                                          {"write_file", &ToolSet::write_file},
                                                          {"list_dir", &ToolSet::list_dir},
                                                          {"str_replace", &ToolSet::str_replace}};
  Method method = nullptr;
  std::string names;
  for (const auto& [tool, m] : kTools) {
    names += (names.empty() ? "" : ", ") + std::string(tool);
    if (name == tool) method = m;
  }
  if (method == nullptr)
    return tool_error(cat("there is no tool named '", valid_utf8(name), "' (the tools: ", names, ")"));
  tool_json args;
  const bool blank = arguments.find_first_not_of(" \t\r\n") == std::string::npos;
  if (blank) {
    args = tool_json::object();
  } else {
    try {
      args = tool_json::parse(arguments);
    } catch (const nlohmann::json::parse_error& e) {
      std::string why = e.what();
      const size_t bracket = why.find("] ");
      if (why.rfind("[json.exception", 0) == 0 && bracket != std::string::npos) why = why.substr(bracket + 2);
      return tool_error(cat("the arguments of ", name, " are not valid JSON: ", valid_utf8(why)));
    }
  }
  try {
    return (this->*method)(args);
  } catch (const std::exception& e) {  // the sandbox's NotFound, Conflict, k3::Error, and bad_alloc
    return tool_error(valid_utf8(e.what()));
  }
}

ToolResult ToolSet::bash(const tool_json& args) {
  const std::string bad = tool_check_fields("bash", args, {{"command", "string", true}, {"timeout", "number", false}});
  if (!bad.empty()) return tool_error(bad);
  const std::string command = args["command"].get<std::string>();
  if (command.find_first_not_of(" \t\r\n") == std::string::npos) return tool_error("bash: 'command' is empty");
  if (command.find('\0') != std::string::npos) return tool_error("bash: 'command' holds a NUL character");
  double timeout = limits_.default_timeout_s;
  if (tool_given(args, "timeout")) {
    timeout = args["timeout"].get<double>();
    if (!(timeout > 0 && timeout <= limits_.max_timeout_s))
      return tool_error(cat("bash: 'timeout' must be more than 0 and at most ", limits_.max_timeout_s, " seconds (got ",
                            timeout, ")"));
  }
  if (sandbox_ == nullptr) return tool_error("no sandbox to run the command in");
  bool cut = false;
  if (deadline_) {
    const double left = std::chrono::duration<double>(*deadline_ - std::chrono::steady_clock::now()).count();
    if (left <= 0) return tool_error("the agent's time limit has passed: no more commands run");
    if (left < timeout) timeout = left, cut = true;
  }
  ExecRequest req;
  // The sandbox runs sh -c; this hands the command to bash, quoted, so it gets bash's syntax as the
  // tool's name promises (sh where a template has no bash).
  const std::string quoted = shell_quote(command);
  req.command =
      "if command -v bash >/dev/null 2>&1; then exec bash -c " + quoted + "; else exec sh -c " + quoted + "; fi";
  req.cwd = "/workspace";
  req.timeout_s = timeout;
  req.output_cap = limits_.output_cap;
  const ExecResult r = sandbox_->exec(req);
  std::string out;
  if (r.timed_out) {
    out += cat("timed out after ", timeout, " s", cut ? " (the agent's time limit)" : "", ": the command was killed\n");
  } else if (r.output_limit) {
    out += "killed: the command wrote more output than the sandbox allows\n";
  } else if (r.signal != 0) {
    out += cat("killed by signal ", r.signal, "\n");
  } else {
    out += cat("exit code: ", r.exit_code, "\n");
  }
  if (r.oom_killed) out += "the sandbox's memory limit killed a process\n";
  if (r.stdout_bytes > 0) out += tool_stream_text("stdout", r.stdout_text, r.stdout_bytes, limits_.output_cap);
  if (r.stderr_bytes > 0) out += tool_stream_text("stderr", r.stderr_text, r.stderr_bytes, limits_.output_cap);
  if (r.stdout_bytes == 0 && r.stderr_bytes == 0) out += "(no output)\n";
  return {out, false};
}

std::string ToolSet::read_text(const std::string& path) const {
  FileLimits fl;
  fl.max_read = limits_.max_file;
  std::string data = sandbox_->read_file(path, fl);
  const std::string shown = tool_shown_path(path);
  if (data.find('\0') != std::string::npos)
    fail(shown, " is not a text file (it holds NUL bytes); look at binary files with bash (od -c, head -c)");
  const size_t bad = tool_invalid_utf8_at(data);
  if (bad != std::string::npos)
    fail(shown, " is not UTF-8 text (byte ", bad, " is not valid UTF-8); look at it with bash (od -c, iconv)");
  return data;
}

ToolResult ToolSet::read_file(const tool_json& args) {
  const std::string bad = tool_check_fields(
      "read_file", args, {{"path", "string", true}, {"offset", "integer", false}, {"limit", "integer", false}});
  if (!bad.empty()) return tool_error(bad);
  const std::string path = args["path"].get<std::string>();
  int64_t offset = 1, limit = -1;
  if (tool_given(args, "offset")) {
    offset = static_cast<int64_t>(args["offset"].get<double>());
    if (offset < 1) return tool_error(cat("read_file: 'offset' counts lines from 1 (got ", offset, ")"));
  }
  if (tool_given(args, "limit")) {
    limit = static_cast<int64_t>(args["limit"].get<double>());
    if (limit < 1) return tool_error(cat("read_file: 'limit' must be at least 1 line (got ", limit, ")"));
  }
  if (sandbox_ == nullptr) return tool_error("no sandbox to read from");
  const std::string text = read_text(path);
  // Line starts; a final newline does not begin another line.
  std::vector<size_t> starts;
  for (size_t i = 0; i < text.size();) {
    starts.push_back(i);
    const size_t nl = text.find('\n', i);
    i = nl == std::string::npos ? text.size() : nl + 1;
  }
  const int64_t lines = static_cast<int64_t>(starts.size());
  if (lines == 0) return {"(the file is empty)", false};
  if (offset > lines)
    return tool_error(cat("read_file: 'offset' ", offset, " is past the end of ", tool_shown_path(path), " (it has ",
                          lines, " line", lines == 1 ? "" : "s", ")"));
  // The end (exclusive) of 1-based line n.
  const auto end_of = [&](int64_t n) { return n == lines ? text.size() : starts[n]; };
  const int64_t last = limit < 0 ? lines : offset - 1 + std::min(lines - (offset - 1), limit);
  const size_t begin = starts[offset - 1];
  // Whole lines up to the byte cap; a first line longer than the cap is cut inside.
  int64_t shown_last = offset - 1;
  while (shown_last < last && end_of(shown_last + 1) - begin <= limits_.max_read) ++shown_last;
  size_t end = 0;
  bool line_cut = false;
  if (shown_last < offset) {
    shown_last = offset;
    end = begin + tool_utf8_cut(std::string_view(text).substr(begin), limits_.max_read);
    line_cut = true;
  } else {
    end = end_of(shown_last);
  }
  std::string out = text.substr(begin, end - begin);
  if (line_cut) {
    out += cat("\n[line ", offset, " is longer than ", tool_size_text(limits_.max_read),
               "; only its start is shown; read it with bash (cut, head -c)]");
  } else if (offset > 1 || shown_last < lines) {
    if (!out.empty() && out.back() != '\n') out += '\n';
    out += cat("[lines ", offset, "-", shown_last, " of ", lines, " shown",
               shown_last < lines ? cat("; continue with offset ", shown_last + 1) : std::string(), "]");
  }
  return {out, false};
}

ToolResult ToolSet::write_file(const tool_json& args) {
  const std::string bad =
      tool_check_fields("write_file", args, {{"path", "string", true}, {"content", "string", true}});
  if (!bad.empty()) return tool_error(bad);
  const std::string path = args["path"].get<std::string>();
  const std::string& content = args["content"].get_ref<const std::string&>();
  if (content.size() > limits_.max_write)
    return tool_error(cat("write_file: the content is ", tool_size_text(content.size()), "; at most ",
                          tool_size_text(limits_.max_write), " can be written"));
  if (sandbox_ == nullptr) return tool_error("no sandbox to write to");
  FileLimits fl;
  fl.max_write = limits_.max_write;
  sandbox_->write_file(path, content, false, fl);
  return {cat("wrote ", content.size(), " bytes to ", tool_shown_path(path)), false};
}

ToolResult ToolSet::list_dir(const tool_json& args) {
  const std::string bad = tool_check_fields("list_dir", args, {{"path", "string", false}});
  if (!bad.empty()) return tool_error(bad);
  const std::string path = tool_given(args, "path") ? args["path"].get<std::string>() : std::string("/workspace");
  if (sandbox_ == nullptr) return tool_error("no sandbox to list");
  std::vector<DirEntry> entries = sandbox_->list_dir(path);
  std::sort(entries.begin(), entries.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  std::string out = cat(tool_shown_path(path), ": ", entries.size(), " entr", entries.size() == 1 ? "y" : "ies", "\n");
  const size_t shown = std::min(entries.size(), limits_.max_entries);
  for (size_t i = 0; i < shown; ++i) {
    const DirEntry& e = entries[i];
    const std::string name = valid_utf8(e.name);
    if (e.type == "dir")
      out += name + "/\n";
    else if (e.type == "symlink")
      out += name + "@\n";
    else if (e.type == "file")
      out += cat(name, "  (", tool_size_text(e.size), ")\n");
    else
      out += cat(name, "  (", e.type, ")\n");
  }
  if (shown < entries.size())
    out += cat("[", entries.size() - shown, " more not shown; list them with bash (ls, find)]\n");
  return {out, false};
}

ToolResult ToolSet::str_replace(const tool_json& args) {
  const std::string bad = tool_check_fields(
      "str_replace", args, {{"path", "string", true}, {"old_str", "string", true}, {"new_str", "string", true}});
  if (!bad.empty()) return tool_error(bad);
  const std::string path = args["path"].get<std::string>();
  const std::string& old_str = args["old_str"].get_ref<const std::string&>();
  const std::string& new_str = args["new_str"].get_ref<const std::string&>();
  if (old_str.empty()) return tool_error("str_replace: 'old_str' is empty; give the exact text to replace");
  if (sandbox_ == nullptr) return tool_error("no sandbox to edit in");
  std::string text = read_text(path);
  // Overlapping matches count: "aa" occurs twice in "aaa", and either would be a guess.
  size_t count = 0, at = std::string::npos;
  for (size_t i = text.find(old_str); i != std::string::npos; i = text.find(old_str, i + 1)) {
    if (count++ == 0) at = i;
  }
  const std::string shown = tool_shown_path(path);
  if (count == 0)
    return tool_error(cat("str_replace: 'old_str' does not occur in ", shown,
                          " (it must match exactly, spaces, tabs and line breaks included)"));
  if (count > 1)
    return tool_error(cat("str_replace: 'old_str' occurs ", count, " times in ", shown,
                          "; it must occur exactly once: include more of the surrounding text"));
  if (text.size() - old_str.size() + new_str.size() > limits_.max_write)
    return tool_error(cat("str_replace: the new file would exceed ", tool_size_text(limits_.max_write)));
  const size_t line =
      static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<ptrdiff_t>(at), '\n')) + 1;
  text.replace(at, old_str.size(), new_str);
  FileLimits fl;
  fl.max_write = limits_.max_write;
  sandbox_->write_file(path, text, false, fl);
  return {cat("replaced 1 occurrence in ", shown, " (at line ", line, ")"), false};
}

}  // namespace k3::agentenv
