#include "io/available_memory.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace k3 {
namespace {

namespace fs = std::filesystem;

// One unsigned number from the start of a file ("max" and unreadable files: nullopt).
std::optional<uint64_t> read_number(const fs::path& p) {
  std::ifstream f(p);
  std::string word;
  if (!(f >> word) || word.empty() || word.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  errno = 0;
  const unsigned long long v = std::strtoull(word.c_str(), nullptr, 10);
  if (errno == ERANGE) return std::nullopt;
  return static_cast<uint64_t>(v);
}

// `key value` lines of memory.stat.
uint64_t stat_value(const fs::path& p, const std::string& key) {
  std::ifstream f(p);
  std::string k;
  unsigned long long v = 0;
  while (f >> k >> v)
    if (k == key) return static_cast<uint64_t>(v);
  return 0;
}

struct Layout {
  fs::path dir;  // the process's cgroup directory under the mount
  fs::path top;  // the mount: the walk stops here
  const char* limit;
  const char* usage;
  const char* inactive;
};

// The deepest existing directory for `rel` under `top` (a namespaced or unmounted path: `top`).
fs::path locate(const fs::path& top, const std::string& rel) {
  fs::path p = top / fs::path(rel).relative_path();
  std::error_code ec;
  return fs::is_directory(p, ec) ? p : top;
}

std::optional<Layout> layout(const std::string& proc_self_cgroup, const std::string& root) {
  std::istringstream in(proc_self_cgroup);
  std::string line;
  std::optional<std::string> v1, v2;
  while (std::getline(in, line)) {
    // hierarchy-id:controllers:path
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) v2 = path;
    std::istringstream cs(controllers);
    for (std::string c; std::getline(cs, c, ',');)
      if (c == "memory") v1 = path;
  }
  std::error_code ec;
  if (v1) {
    const fs::path top = fs::path(root) / "memory";
    if (fs::exists(top / "memory.limit_in_bytes", ec))
      return Layout{locate(top, *v1), top, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"};
  }
  if (v2) {
    const fs::path top(root);
    const fs::path dir = locate(top, *v2);
    if (fs::exists(dir / "memory.current", ec) || fs::exists(top / "cgroup.controllers", ec))
      return Layout{dir, top, "memory.max", "memory.current", "inactive_file"};
  }
  return std::nullopt;
}

}  // namespace

std::optional<uint64_t> cgroup_memory_room(const std::string& proc_self_cgroup, const std::string& cgroup_root) {
  const std::optional<Layout> l = layout(proc_self_cgroup, cgroup_root);
  if (!l) return std::nullopt;
  std::optional<uint64_t> room;
  const fs::path top = l->top.lexically_normal();
  for (fs::path dir = l->dir.lexically_normal();; dir = dir.parent_path()) {
    const std::optional<uint64_t> limit = read_number(dir / l->limit);
    // v1 reports "no limit" as a huge page-rounded number (2^63 - 4096).
    if (limit && *limit < (uint64_t{1} << 62)) {
      const uint64_t usage = read_number(dir / l->usage).value_or(0);
      const uint64_t inactive = stat_value(dir / "memory.stat", l->inactive);
      const uint64_t used = usage > inactive ? usage - inactive : 0;
      const uint64_t here = *limit > used ? *limit - used : 0;
      room = room ? std::min(*room, here) : here;
    }
    if (dir == top || dir == dir.parent_path() || dir.native().size() <= top.native().size()) break;
  }
  return room;
}

uint64_t meminfo_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  uint64_t kb = 0;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kb << 10;
  }
  return 0;
}

uint64_t available_memory_bytes() {
  const uint64_t avail = meminfo_available_bytes();
  std::ifstream f("/proc/self/cgroup");
  std::stringstream text;
  text << f.rdbuf();
  const std::optional<uint64_t> room = cgroup_memory_room(text.str(), "/sys/fs/cgroup");
  if (!room) return avail;
  // A cgroup with no room at all still reports 1 byte, so "0: unknown" keeps its meaning.
  return avail == 0 ? std::max<uint64_t>(*room, 1) : std::max<uint64_t>(std::min(avail, *room), 1);
}

}  // namespace k3
