// huge_page_coverage: smaps parsing (whole and partial mappings, both huge-page fields, text
// that is not smaps) and this process's own smaps.
#include "io/huge_pages.h"

#include <sys/mman.h>

#include <cstring>

#include <gtest/gtest.h>

namespace k3 {
namespace {

// Two mappings: 8 MiB with 4 MiB of anonymous huge pages, then 4 MiB of a file with 2 MiB
// PMD-mapped; a third, unrelated one with huge pages the ranges never touch.
const char* kSmaps =
    "7f0000000000-7f0000800000 r--p 00000000 00:00 0 \n"
    "Size:               8192 kB\n"
    "Rss:                8192 kB\n"
    "AnonHugePages:      4096 kB\n"
    "FilePmdMapped:         0 kB\n"
    "VmFlags: rd mr mw me ac hg\n"
    "7f0000800000-7f0000c00000 r--s 00000000 fe:00 1234   /models/a-b.safetensors\n"
    "Size:               4096 kB\n"
    "AnonHugePages:         0 kB\n"
    "FilePmdMapped:      2048 kB\n"
    "7f1000000000-7f1000400000 rw-p 00000000 00:00 0 \n"
    "AnonHugePages:      4096 kB\n";

TEST(HugePages, CountsWholeAndPartialMappings) {
  constexpr uintptr_t a = 0x7f0000000000, b = 0x7f0000800000, c = 0x7f0000c00000;
  HugePageCoverage whole = huge_page_coverage(kSmaps, {{a, b}, {b, c}});
  EXPECT_EQ(whole.bytes, 12u << 20);
  EXPECT_EQ(whole.mapped, 12u << 20);
  EXPECT_TRUE(whole.known());
  EXPECT_EQ(whole.huge, 6u << 20);
  EXPECT_DOUBLE_EQ(whole.fraction(), 0.5);
  // A quarter of the first mapping gets a quarter of its huge bytes; a range across the
  // boundary gets a share of each.
  HugePageCoverage part = huge_page_coverage(kSmaps, {{a, a + (2u << 20)}});
  EXPECT_EQ(part.bytes, 2u << 20);
  EXPECT_EQ(part.huge, 1u << 20);
  HugePageCoverage across = huge_page_coverage(kSmaps, {{b - (4u << 20), b + (2u << 20)}});
  EXPECT_EQ(across.huge, (2u << 20) + (1u << 20));
  // Outside every mapping, and empty ranges.
  HugePageCoverage none = huge_page_coverage(kSmaps, {{0x1000, 0x2000}, {a, a}});
  EXPECT_EQ(none.bytes, 0x1000u);
  EXPECT_EQ(none.mapped, 0u);
  EXPECT_FALSE(none.known());
  EXPECT_EQ(none.huge, 0u);
  EXPECT_EQ(HugePageCoverage{}.fraction(), 0.0);
}

TEST(HugePages, TextThatIsNotSmapsCountsNothing) {
  for (const char* text : {"", "AnonHugePages: 4096 kB\n", "garbage-line here\nAnonHugePages: 99 kB\n",
                           "zz00-0100 r--p\nAnonHugePages: 4 kB\n", "0100-0010 r--p\nAnonHugePages: 4 kB\n"}) {
    const HugePageCoverage c = huge_page_coverage(text, {{0, 0x10000}});
    EXPECT_EQ(c.bytes, 0x10000u) << text;
    EXPECT_EQ(c.mapped, 0u) << text;
    EXPECT_EQ(c.huge, 0u) << text;
  }
  // An unreadable entry after a good one: its fields are not added to the good mapping.
  const HugePageCoverage c =
      huge_page_coverage("0000-10000 r--p 0 0 0\nAnonHugePages: 4 kB\nzz-10 r--p\nAnonHugePages: 32 kB\n",
                         {{0, 0x10000}});
  EXPECT_EQ(c.mapped, 0x10000u);
  EXPECT_EQ(c.huge, 4096u);
}

// This process: a 4 MiB anonymous mapping, touched; THP may or may not back it, but the
// coverage stays within the range.
TEST(HugePages, ThisProcess) {
  const size_t n = 4u << 20;
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  ::madvise(p, n, MADV_HUGEPAGE);
  std::memset(p, 1, n);
  const auto lo = reinterpret_cast<uintptr_t>(p);
  const HugePageCoverage c = huge_page_coverage({{lo, lo + n}});
  EXPECT_EQ(c.bytes, n);
  EXPECT_EQ(c.mapped, n);  // smaps was read and lists the mapping
  EXPECT_LE(c.huge, n);
  ::munmap(p, n);
}

}  // namespace
}  // namespace k3
