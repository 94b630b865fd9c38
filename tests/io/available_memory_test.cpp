// available_memory_bytes() and the cgroup limits it honours, on fake /sys/fs/cgroup trees.
#include "io/available_memory.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "support/test_support.h"

namespace k3 {
namespace {

using testing::TempDir;

constexpr uint64_t kMiB = uint64_t{1} << 20;

void put(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  testing::write_file(path, text);
}

TEST(AvailableMemory, MachineFigureIsKnownAndBoundedByMemInfo) {
  const uint64_t meminfo = meminfo_available_bytes();
  EXPECT_GT(meminfo, 0u);  // Linux always reports MemAvailable
  const uint64_t avail = available_memory_bytes();
  EXPECT_GT(avail, 0u);
  EXPECT_LE(avail, meminfo + 256 * kMiB);  // MemAvailable moves between the two reads
}

TEST(AvailableMemory, CgroupV2LimitLessUsagePlusReclaimableCache) {
  TempDir tmp;
  const std::string root = tmp.path();
  put(root + "/cgroup.controllers", "memory\n");
  put(root + "/box/svc/memory.max", std::to_string(8192 * kMiB) + "\n");
  put(root + "/box/svc/memory.current", std::to_string(3072 * kMiB) + "\n");
  put(root + "/box/svc/memory.stat", "anon 1\nfile 5\ninactive_file " + std::to_string(1024 * kMiB) + "\nactive_file 7\n");
  // 8 GiB - (3 GiB used - 1 GiB reclaimable) = 6 GiB.
  EXPECT_EQ(cgroup_memory_room("0::/box/svc\n", root), 6144 * kMiB);
  // A tighter parent wins: 7 GiB limit, 4 GiB used there.
  put(root + "/box/memory.max", std::to_string(7168 * kMiB));
  put(root + "/box/memory.current", std::to_string(4096 * kMiB));
  EXPECT_EQ(cgroup_memory_room("0::/box/svc\n", root), 3072 * kMiB);
  // "max" means no limit at that level.
  put(root + "/box/memory.max", "max\n");
  EXPECT_EQ(cgroup_memory_room("0::/box/svc\n", root), 6144 * kMiB);
  // Over the limit already: no room, not a wrapped huge number.
  put(root + "/box/svc/memory.current", std::to_string(9999 * kMiB));
  put(root + "/box/svc/memory.stat", "inactive_file 0\n");
  EXPECT_EQ(cgroup_memory_room("0::/box/svc\n", root), 0u);
}

TEST(AvailableMemory, CgroupV2NamespaceAndNoLimit) {
  TempDir tmp;
  const std::string root = tmp.path();
  put(root + "/cgroup.controllers", "cpu memory\n");
  // A cgroup namespace shows "/": the limit sits at the mount's root.
  put(root + "/memory.max", std::to_string(512 * kMiB));
  put(root + "/memory.current", std::to_string(12 * kMiB));
  EXPECT_EQ(cgroup_memory_room("0::/\n", root), 500 * kMiB);
  // A path that is not visible under the mount is looked up at the root too.
  EXPECT_EQ(cgroup_memory_room("0::/not/here\n", root), 500 * kMiB);
  put(root + "/memory.max", "max\n");
  EXPECT_EQ(cgroup_memory_room("0::/\n", root), std::nullopt);
}

TEST(AvailableMemory, CgroupV1MemoryController) {
  TempDir tmp;
  const std::string root = tmp.path();
  const std::string mem = root + "/memory";
  // v1's "unlimited" is 2^63 rounded down to a page.
  put(mem + "/memory.limit_in_bytes", "9223372036854771712\n");
  put(mem + "/memory.usage_in_bytes", "6346792960\n");
  put(mem + "/job/memory.limit_in_bytes", std::to_string(2048 * kMiB));
  put(mem + "/job/memory.usage_in_bytes", std::to_string(1000 * kMiB));
  put(mem + "/job/memory.stat", "cache 5\ninactive_file 1\ntotal_inactive_file " + std::to_string(200 * kMiB) + "\n");
  const std::string self = "12:pids:/job\n4:cpu,memory:/job\n1:name=systemd:/\n0::/\n";
  EXPECT_EQ(cgroup_memory_room(self, root), 1248 * kMiB);
  EXPECT_EQ(cgroup_memory_room("4:memory:/\n", root), std::nullopt);  // the root: unlimited
}

TEST(AvailableMemory, NothingReadableMeansNoLimit) {
  TempDir tmp;
  EXPECT_EQ(cgroup_memory_room("", tmp.path()), std::nullopt);
  EXPECT_EQ(cgroup_memory_room("garbage\n::\n", tmp.path()), std::nullopt);
  EXPECT_EQ(cgroup_memory_room("0::/a\n", tmp.path() + "/missing"), std::nullopt);
  put(tmp.file("cgroup.controllers"), "memory\n");
  put(tmp.file("memory.max"), "-5\n");  // unreadable numbers are no limit, not a wrap
  EXPECT_EQ(cgroup_memory_room("0::/\n", tmp.path()), std::nullopt);
}

}  // namespace
}  // namespace k3
