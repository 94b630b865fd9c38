// How much memory k3 may still fill: the smaller of the kernel's MemAvailable and the room left
// under the process's cgroup memory limit (a container or systemd slice whose limit is below the
// host's RAM).  `--weights auto` reads a checkpoint into memory only when it fits here; judged on
// MemAvailable alone, a 16 GiB checkpoint in an 8 GiB container was read in and OOM-killed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace k3 {

// min(MemAvailable, cgroup room) in bytes; 0 if MemAvailable is unknown.
uint64_t available_memory_bytes();

// MemAvailable from /proc/meminfo (bytes; 0 if unknown).
uint64_t meminfo_available_bytes();

// Room under the memory limits of the cgroup named in `proc_self_cgroup` (the text of
// /proc/self/cgroup), with the hierarchy mounted at `cgroup_root` (/sys/fs/cgroup): for each
// level from the process's cgroup up to the root that has a limit, limit - usage + inactive file
// pages (page cache the kernel reclaims before it OOM-kills), and the smallest of those.  Reads
// cgroup v2 (memory.max, memory.current, memory.stat inactive_file) or v1 (memory/
// memory.limit_in_bytes, memory.usage_in_bytes, memory.stat total_inactive_file).  A process
// whose cgroup path is not visible under the mount (a cgroup namespace shows "/") is looked up
// at the mount's root.  nullopt when no level sets a limit or nothing can be read.
std::optional<uint64_t> cgroup_memory_room(const std::string& proc_self_cgroup, const std::string& cgroup_root);

}  // namespace k3
