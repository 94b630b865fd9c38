// The disk probe (perf/disk_probe.h) on small files: what it reads, how it spreads a byte limit
// over the files, and its count of file holes.  Correctness only; the bandwidth of a few MiB
// says nothing about a disk.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "perf/disk_probe.h"
#include "support/test_support.h"

namespace k3 {
namespace {

constexpr uint64_t kMi = uint64_t{1} << 20;

// `data` bytes of a non-zero pattern, then `hole` bytes of hole.
void make_file(const std::string& path, uint64_t data, uint64_t hole) {
  std::string bytes(data, '\0');
  for (uint64_t i = 0; i < data; ++i) bytes[i] = static_cast<char>(1 + i % 251);
  testing::write_file(path, bytes);
  if (hole > 0) {
    ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(data + hole)), 0) << path;
  }
}

TEST(DiskProbe, ReadsWhatItIsAskedAndCountsHoles) {
  testing::TempDir tmp;
  make_file(tmp.file("data"), 3 * kMi + 100, 0);  // not a multiple of the block: a short last read
  DiskProbeResult r = probe_disk({tmp.file("data")});
  EXPECT_EQ(r.bytes, 3 * kMi + 100);
  EXPECT_EQ(r.files, 1);
  EXPECT_GT(r.gbps, 0.0);
  EXPECT_NEAR(r.hole_fraction, 0.0, 1e-9);
  EXPECT_FALSE(r.stopped_early);

  // A file of 1 MiB of data and 15 MiB of hole (where the file system keeps holes, as tmpfs and
  // ext4 do: its blocks say so).
  make_file(tmp.file("sparse"), kMi, 15 * kMi);
  r = probe_disk({tmp.file("sparse")});
  EXPECT_EQ(r.bytes, 16 * kMi);
  struct stat st {};
  ASSERT_EQ(::stat(tmp.file("sparse").c_str(), &st), 0);
  if (static_cast<uint64_t>(st.st_blocks) * 512 < 2 * kMi) {
    EXPECT_NEAR(r.hole_fraction, 15.0 / 16, 0.01);
  } else {
    EXPECT_EQ(r.hole_fraction, 0.0);  // the file system filled the hole
  }
}

TEST(DiskProbe, SpreadsTheByteLimitOverTheFiles) {
  testing::TempDir tmp;
  make_file(tmp.file("a"), 20 * kMi, 0);
  make_file(tmp.file("b"), 2 * kMi, 0);
  make_file(tmp.file("c"), 20 * kMi, 0);
  DiskProbeOptions o;
  o.max_bytes = 30 * kMi;
  o.threads = 2;
  // b gives its 2 MiB; a and c share the rest.
  const DiskProbeResult r = probe_disk({tmp.file("a"), tmp.file("b"), tmp.file("c")}, o);
  EXPECT_EQ(r.bytes, 30 * kMi);
  EXPECT_EQ(r.files, 3);
  o.max_bytes = 100 * kMi;  // more than there is: everything once
  EXPECT_EQ(probe_disk({tmp.file("a"), tmp.file("b"), tmp.file("c")}, o).bytes, 42 * kMi);
}

TEST(DiskProbe, NamesWhatIsWrong) {
  testing::TempDir tmp;
  EXPECT_NE(testing::error_of([&] { probe_disk({tmp.file("absent")}); }).find(tmp.file("absent") + ": cannot open"),
            std::string::npos);
  testing::write_file(tmp.file("empty"), "");
  EXPECT_NE(testing::error_of([&] { probe_disk({tmp.file("empty")}); }).find("empty"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { probe_disk({}); }).find("no files"), std::string::npos);
}

}  // namespace
}  // namespace k3
