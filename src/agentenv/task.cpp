#include "agentenv/task.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <utility>

#include "agentenv/tools.h"
#include "base/error.h"
#include "base/log.h"

namespace k3::agentenv {
namespace {

namespace task_fs = std::filesystem;
using task_json = nlohmann::ordered_json;

constexpr double kTaskMaxTimeout = 86400;  // a day: longer is surely a mistake (and overflows nothing)

std::string task_read_host_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  K3_CHECK(in.good(), "cannot read ", path);
  std::ostringstream os;
  os << in.rdbuf();
  K3_CHECK(!in.bad(), "cannot read ", path);
  return os.str();
}

// Where a task.toml error is: "<file>: [section] key (line N)".
std::string task_where(const std::string& file, const std::string& section, const std::string& key,
                       const toml::node& node) {
  std::string where = file + ": " + (section.empty() ? "" : "[" + section + "] ") + key;
  if (node.source().begin.line > 0) where += cat(" (line ", node.source().begin.line, ")");
  return where;
}

std::string task_toml_type(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    default:
      return "a date or time";
  }
}

// A number (integer or float) in (0, kTaskMaxTimeout].
double task_seconds(const std::string& where, const toml::node& node) {
  K3_CHECK(node.is_number(), where, " must be a number of seconds (got ", task_toml_type(node), ")");
  const double v = node.is_integer() ? static_cast<double>(*node.value<int64_t>()) : *node.value<double>();
  K3_CHECK(std::isfinite(v) && v > 0 && v <= kTaskMaxTimeout, where, " must be more than 0 and at most ",
           kTaskMaxTimeout, " seconds (got ", v, ")");
  return v;
}

std::string task_string(const std::string& where, const toml::node& node) {
  K3_CHECK(node.is_string(), where, " must be a string (got ", task_toml_type(node), ")");
  return node.as_string()->get();
}

// "2G", "512M", "1.5g", "2GiB", "1024" (MiB) or an integer count of MiB, as bytes.
int64_t task_memory_bytes(const std::string& where, const toml::node& node) {
  constexpr const char* kShape = "a size such as \"512M\" or \"2G\", or an integer count of MiB";
  double mib = 0;
  if (node.is_integer()) {
    mib = static_cast<double>(*node.value<int64_t>());
  } else {
    K3_CHECK(node.is_string(), where, " must be ", kShape, " (got ", task_toml_type(node), ")");
    const std::string text = node.as_string()->get();
    const char* begin = text.c_str();
    char* end = nullptr;
    const double number = std::strtod(begin, &end);
    std::string unit(end);
    for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
    if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
    const double scale = unit.empty() || unit == "M" ? 1.0
                         : unit == "K"               ? 1.0 / 1024
                         : unit == "G"               ? 1024.0
                         : unit == "T"               ? 1024.0 * 1024
                                                     : -1.0;
    K3_CHECK(end != begin && !std::isspace(static_cast<unsigned char>(text[0])) && scale > 0, where, " must be ",
             kShape, " (got \"", text, "\")");
    mib = number * scale;
  }
  K3_CHECK(std::isfinite(mib) && mib >= 1 && mib <= 1024.0 * 1024, where, " must be from 1 MiB to 1 TiB (got ", mib,
           " MiB)");
  return static_cast<int64_t>(mib * 1024 * 1024);
}

// Every key of `table` must be one of `keys`.
void task_known_keys(const std::string& file, const std::string& section, const toml::table& table,
                     std::initializer_list<const char*> keys) {
  std::string names;
  for (const char* k : keys) names += (names.empty() ? "" : ", ") + std::string(k);
  for (auto&& [key, node] : table) {
    const bool known = std::any_of(keys.begin(), keys.end(), [&](const char* k) { return key.str() == k; });
    K3_CHECK(known, task_where(file, section, std::string(key.str()), node), " is not a known key (known: ", names,
             ")");
  }
}

const toml::table& task_section(const std::string& file, const toml::table& root, const char* name) {
  static const toml::table kEmpty;
  const toml::node* node = root.get(name);
  if (node == nullptr) return kEmpty;
  K3_CHECK(node->is_table(), task_where(file, "", name, *node), " must be a table ([", name, "]), not ",
           task_toml_type(*node));
  return *node->as_table();
}

void task_read_toml(const std::string& file, Task& t) {
  toml::table root;
  try {
    root = toml::parse_file(file);
  } catch (const toml::parse_error& e) {
    fail(file, ":", e.source().begin.line, ":", e.source().begin.column, ": ", e.description());
  }
  task_known_keys(file, "", root, {"version", "metadata", "agent", "verifier", "environment"});
  if (const toml::node* v = root.get("version")) task_string(task_where(file, "", "version", *v), *v);
  if (const toml::node* m = root.get("metadata")) {
    K3_CHECK(m->is_table(), task_where(file, "", "metadata", *m), " must be a table ([metadata]), not ",
             task_toml_type(*m));
    std::ostringstream os;
    os << toml::json_formatter{*m->as_table()};
    t.metadata = task_json::parse(os.str());
  }

  const toml::table& agent = task_section(file, root, "agent");
  task_known_keys(file, "agent", agent, {"timeout_sec"});
  if (const toml::node* n = agent.get("timeout_sec"))
    t.agent_timeout_s = task_seconds(task_where(file, "agent", "timeout_sec", *n), *n);

  const toml::table& verifier = task_section(file, root, "verifier");
  task_known_keys(file, "verifier", verifier, {"timeout_sec"});
  if (const toml::node* n = verifier.get("timeout_sec"))
    t.verifier_timeout_s = task_seconds(task_where(file, "verifier", "timeout_sec", *n), *n);

  const toml::table& env = task_section(file, root, "environment");
  task_known_keys(file, "environment", env, {"memory", "pids", "cpus", "network", "template", "setup"});
  if (const toml::node* n = env.get("memory"))
    t.spec.limits.memory_bytes = task_memory_bytes(task_where(file, "environment", "memory", *n), *n);
  if (const toml::node* n = env.get("pids")) {
    const std::string where = task_where(file, "environment", "pids", *n);
    K3_CHECK(n->is_integer(), where, " must be an integer (got ", task_toml_type(*n), ")");
    const int64_t pids = *n->value<int64_t>();
    K3_CHECK(pids >= 1 && pids <= 1 << 22, where, " must be from 1 to ", 1 << 22, " (got ", pids, ")");
    t.spec.limits.pids = pids;
  }
  if (const toml::node* n = env.get("cpus")) {
    const std::string where = task_where(file, "environment", "cpus", *n);
    K3_CHECK(n->is_number(), where, " must be a number of cores (got ", task_toml_type(*n), ")");
    const double cpus = n->is_integer() ? static_cast<double>(*n->value<int64_t>()) : *n->value<double>();
    K3_CHECK(std::isfinite(cpus) && cpus > 0 && cpus <= 4096, where, " must be more than 0 and at most 4096 (got ",
             cpus, ")");
    t.spec.limits.cpus = cpus;
  }
  if (const toml::node* n = env.get("network")) {
    const std::string where = task_where(file, "environment", "network", *n);
    const std::string net = task_string(where, *n);
    K3_CHECK(net == "none" || net == "loopback", where, " must be \"none\" or \"loopback\" (got \"", net, "\")");
    t.spec.network = net == "none" ? Network::kNone : Network::kLoopback;
  }
  if (const toml::node* n = env.get("template")) {
    const std::string where = task_where(file, "environment", "template", *n);
    const std::string given = task_string(where, *n);
    K3_CHECK(!given.empty(), where, " is empty (leave it out for the host's system directories)");
    task_fs::path p(given);
    if (p.is_relative()) p = task_fs::path(t.dir) / p;
    std::error_code ec;
    K3_CHECK(task_fs::is_directory(p, ec), where, ": ", p.string(), " is not a directory");
    t.spec.template_dir = task_fs::canonical(p).string();
  }
  if (const toml::node* n = env.get("setup")) {
    const std::string where = task_where(file, "environment", "setup", *n);
    t.setup = task_string(where, *n);
    K3_CHECK(t.setup.find_first_not_of(" \t\r\n") != std::string::npos, where,
             " is empty (leave it out when there is nothing to set up)");
  }
}

// An ExecResult's ending, in words.
std::string task_exit_text(const ExecResult& r) {
  if (r.timed_out) return "timed out";
  if (r.signal != 0) return cat("killed by signal ", r.signal);
  return cat("exit code ", r.exit_code);
}

ExecRequest task_request(std::string command, std::string cwd, double timeout_s) {
  ExecRequest req;
  req.command = std::move(command);
  req.cwd = std::move(cwd);
  req.timeout_s = timeout_s;
  return req;
}

// Splits `words` into sh commands `prefix w1 w2 ...` of bounded length and runs each.
void task_run_batched(Sandbox& sandbox, const std::string& prefix, const std::vector<std::string>& words) {
  size_t i = 0;
  while (i < words.size()) {
    std::string command = prefix;
    while (i < words.size() && (command.size() < 64 * 1024 || command == prefix)) {
      command += ' ';
      command += shell_quote(words[i++]);
    }
    const ExecResult r = sandbox.exec(task_request(std::move(command), "/", 60));
    K3_CHECK(r.exit_code == 0, "'", prefix, " ...' failed in the sandbox (", task_exit_text(r),
             "): ", valid_utf8(r.stderr_text));
  }
}

std::string task_trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace

Task load_task(const std::string& dir) {
  std::error_code ec;
  K3_CHECK(task_fs::exists(dir, ec), "the task folder ", dir, " does not exist");
  K3_CHECK(task_fs::is_directory(dir, ec), "the task folder ", dir, " is not a directory");
  Task t;
  t.dir = task_fs::canonical(dir).string();
  t.name = task_fs::path(t.dir).filename().string();
  const std::string instruction = t.dir + "/instruction.md";
  K3_CHECK(task_fs::is_regular_file(instruction, ec), "the task ", t.dir, " has no instruction.md");
  t.instruction = task_read_host_file(instruction);
  K3_CHECK(task_trim(t.instruction) != "", instruction, " is empty");
  K3_CHECK(valid_utf8(t.instruction) == t.instruction, instruction, " is not UTF-8 text");
  const std::string toml_file = t.dir + "/task.toml";
  if (task_fs::exists(toml_file, ec)) task_read_toml(toml_file, t);
  if (task_fs::exists(t.files_dir(), ec))
    K3_CHECK(task_fs::is_directory(t.files_dir(), ec), t.files_dir(), " is not a directory");
  K3_CHECK(task_fs::is_regular_file(t.tests_dir() + "/test.sh", ec), "the task ", t.dir,
           " has no tests/test.sh (its verifier)");
  if (task_fs::exists(t.dir + "/environment/Dockerfile", ec) && t.spec.template_dir.empty())
    log_warn("the task ", t.name, " has environment/Dockerfile, which k3 does not build; it runs on the host's ",
             "system directories ([environment] template gives another base)");
  return t;
}

std::vector<Task> load_tasks(const std::string& dir) {
  std::error_code ec;
  K3_CHECK(task_fs::exists(dir, ec), "the tasks folder ", dir, " does not exist");
  K3_CHECK(task_fs::is_directory(dir, ec), "the tasks folder ", dir, " is not a directory");
  if (task_fs::exists(task_fs::path(dir) / "instruction.md", ec)) return {load_task(dir)};
  std::vector<std::string> names;
  for (const auto& entry : task_fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || !entry.is_directory()) continue;
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  K3_CHECK(!names.empty(), dir, " holds no tasks: it has no instruction.md and no sub-folders");
  std::vector<Task> tasks;
  for (const std::string& name : names) {
    const std::string sub = (task_fs::path(dir) / name).string();
    K3_CHECK(task_fs::exists(sub + "/instruction.md", ec), "the tasks folder ", dir, " has a sub-folder ", name,
             " that is not a task (no instruction.md)");
    tasks.push_back(load_task(sub));
  }
  return tasks;
}

void copy_into_sandbox(Sandbox& sandbox, const std::string& from, const std::string& to) {
  std::vector<std::string> dirs = {to}, executables, others;
  std::vector<task_fs::path> files;
  for (auto it = task_fs::recursive_directory_iterator(from); it != task_fs::recursive_directory_iterator(); ++it) {
    const task_fs::path rel = task_fs::relative(it->path(), from);
    const std::string dest = to + "/" + rel.generic_string();
    const task_fs::file_status st = it->symlink_status();
    if (task_fs::is_directory(st)) {
      dirs.push_back(dest);
    } else if (task_fs::is_regular_file(st)) {
      sandbox.write_file(dest, task_read_host_file(it->path().string()));
      const bool exec = (st.permissions() & task_fs::perms::owner_exec) != task_fs::perms::none;
      (exec ? executables : others).push_back(dest);
    } else {
      fail(it->path().string(), " is neither a regular file nor a folder (task files are copied as plain files)");
    }
  }
  task_run_batched(sandbox, "mkdir -p --", dirs);
  if (!executables.empty()) task_run_batched(sandbox, "chmod 755 --", executables);
  if (!others.empty()) task_run_batched(sandbox, "chmod 644 --", others);
}

void prepare_task_sandbox(const Task& task, Sandbox& sandbox) {
  std::error_code ec;
  if (task_fs::is_directory(task.files_dir(), ec)) copy_into_sandbox(sandbox, task.files_dir(), "/workspace");
  if (task.setup.empty()) return;
  const ExecResult r = sandbox.exec(task_request(task.setup, "/workspace", task.agent_timeout_s));
  K3_CHECK(r.exit_code == 0 && !r.timed_out, "the setup command of the task ", task.name, " failed (",
           task_exit_text(r), "): ", valid_utf8(task_trim(r.stderr_text + "\n" + r.stdout_text)));
}

task_json to_json(const VerifierResult& v) {
  task_json j = task_json::object();
  j["reward"] = v.reward;
  j["reward_source"] = v.reward_source;
  j["exit_code"] = v.exec.exit_code;
  j["timed_out"] = v.exec.timed_out;
  j["stdout"] = valid_utf8(v.exec.stdout_text);
  j["stderr"] = valid_utf8(v.exec.stderr_text);
  j["seconds"] = v.seconds;
  j["error"] = v.error.empty() ? task_json(nullptr) : task_json(v.error);
  return j;
}

VerifierResult run_verifier(const Task& task, Sandbox& sandbox) {
  const auto start = std::chrono::steady_clock::now();
  VerifierResult v;
  const ExecResult c =
      sandbox.exec(task_request("rm -rf /tests /logs/verifier && mkdir -p /tests /logs/verifier /workspace", "/", 60));
  K3_CHECK(c.exit_code == 0, "cannot empty /tests and /logs/verifier for the verifier (", task_exit_text(c),
           "): ", valid_utf8(c.stderr_text));
  copy_into_sandbox(sandbox, task.tests_dir(), "/tests");
  v.exec = sandbox.exec(task_request("bash /tests/test.sh", "/workspace", task.verifier_timeout_s));

  const auto read = [&sandbox](const char* path) -> std::optional<std::string> {
    try {
      return sandbox.read_file(path);
    } catch (const NotFound&) {
      return std::nullopt;
    }
  };
  if (const std::optional<std::string> text = read("/logs/verifier/reward.txt")) {
    v.reward_source = "reward.txt";
    const std::string s = task_trim(*text);
    char* end = nullptr;
    const double r = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(r))
      v.reward = r;
    else
      v.error = cat("/logs/verifier/reward.txt holds '", valid_utf8(s.substr(0, 100)), "', not a number");
  } else if (const std::optional<std::string> text = read("/logs/verifier/reward.json")) {
    v.reward_source = "reward.json";
    const task_json j = task_json::parse(*text, nullptr, false);
    if (j.is_discarded())
      v.error = "/logs/verifier/reward.json is not valid JSON";
    else if (!j.is_object() || !j.contains("reward") || !j["reward"].is_number())
      v.error = "/logs/verifier/reward.json has no number \"reward\" (it should be {\"reward\": x})";
    else
      v.reward = j["reward"].get<double>();
  } else {
    v.reward_source = "exit code";
    v.reward = v.exec.exit_code == 0 && !v.exec.timed_out ? 1 : 0;
  }
  if (!v.error.empty()) v.reward = 0;
  v.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return v;
}

}  // namespace k3::agentenv
