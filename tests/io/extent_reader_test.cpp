// Direct-I/O reads of file ranges (io/extent_reader.h) against the file's bytes, and the NUMA
// node lists (io/numa.h).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "io/extent_reader.h"
#include "io/numa.h"
#include "support/test_support.h"

namespace k3 {
namespace {

struct Aligned {
  explicit Aligned(size_t n) {
    void* p = nullptr;
    EXPECT_EQ(::posix_memalign(&p, ExtentReader::kAlign, n), 0);
    mem.reset(static_cast<uint8_t*>(p));
  }
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> mem;
};

TEST(ExtentReader, ReadsRangesExactlyAcrossChunksAndTheFileEnd) {
  testing::TempDir tmp;
  // 20 MiB + 1234 bytes: several 8 MiB chunks and a last block cut by the end of the file.
  std::string data(size_t{20} * 1024 * 1024 + 1234, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 2654435761u) >> 13);
  testing::write_file(tmp.file("a"), data);
  testing::write_file(tmp.file("b"), data.substr(0, 5000));
  ExtentReader reader({tmp.file("a"), tmp.file("b")}, 3);
  struct Range {
    int file;
    uint64_t offset, length;
  };
  const uint64_t size = data.size();
  for (const Range& r : {Range{0, 0, size}, Range{0, 4096, 8u << 20}, Range{0, 12288, size - 12288},
                         Range{1, 0, 5000}, Range{0, (size / 4096) * 4096, size % 4096}}) {
    SCOPED_TRACE(::testing::Message() << r.file << " " << r.offset << " " << r.length);
    const uint64_t cap = (r.length + 4095) / 4096 * 4096;
    Aligned buf(cap);
    std::memset(buf.mem.get(), 0x5a, cap);
    auto t = std::make_shared<ExtentReader::Ticket>();
    reader.read(r.file, r.offset, r.length, buf.mem.get(), t, r.file == 1);
    t->wait();
    EXPECT_TRUE(t->done());
    const std::string& src = r.file == 0 ? data : data.substr(0, 5000);
    EXPECT_EQ(std::memcmp(buf.mem.get(), src.data() + r.offset, r.length), 0);
  }
  EXPECT_GE(reader.bytes_read(), 2 * size);
}

TEST(ExtentReader, NamesTheFileThatShrankOrIsMissing) {
  testing::TempDir tmp;
  testing::write_file(tmp.file("a"), std::string(64 * 1024, 'x'));
  ExtentReader reader({tmp.file("a")});
  ASSERT_EQ(::truncate(tmp.file("a").c_str(), 4096), 0);
  Aligned buf(64 * 1024);
  auto t = std::make_shared<ExtentReader::Ticket>();
  reader.read(0, 32768, 32768, buf.mem.get(), t, false);
  const std::string err = testing::error_of([&] { t->wait(); });
  EXPECT_NE(err.find(tmp.file("a") + ": file shrank to 4096 bytes"), std::string::npos) << err;

  const std::string missing = testing::error_of([&] { ExtentReader r({tmp.file("nope")}); });
  EXPECT_NE(missing.find(tmp.file("nope") + ": cannot open"), std::string::npos) << missing;
  // Unaligned requests are a caller's bug, refused by name.
  const std::string unaligned =
      testing::error_of([&] { reader.read(0, 100, 10, buf.mem.get(), std::make_shared<ExtentReader::Ticket>(), false); });
  EXPECT_NE(unaligned.find("unaligned read"), std::string::npos) << unaligned;
}

TEST(Numa, ParsesSysfsNodeLists) {
  EXPECT_EQ(parse_node_list("0\n"), std::vector<int>({0}));
  EXPECT_EQ(parse_node_list("0-3"), std::vector<int>({0, 1, 2, 3}));
  EXPECT_EQ(parse_node_list("0,2-3,7"), std::vector<int>({0, 2, 3, 7}));
  EXPECT_TRUE(parse_node_list("3-1").empty());
  EXPECT_TRUE(parse_node_list("x").empty());
  EXPECT_FALSE(memory_nodes().empty());
  // On one node, interleaving is a no-op that says so.
  if (memory_nodes().size() == 1) {
    std::vector<char> v(1 << 20);
    EXPECT_FALSE(interleave_over_nodes(v.data(), v.size()));
  }
}

}  // namespace
}  // namespace k3
