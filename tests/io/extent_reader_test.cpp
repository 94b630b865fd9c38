// Reads of file ranges (io/extent_reader.h) against the file's bytes, through both backends
// (pread threads and io_uring), and the NUMA node lists (io/numa.h).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "io/extent_reader.h"
#include "io/numa.h"
#include "support/test_support.h"

namespace k3 {
namespace {

using Backend = ExtentReader::Backend;

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

std::string test_bytes(size_t n, uint32_t seed = 0) {
  std::string data(n, '\0');
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<char>(((i + seed) * 2654435761u) >> 13);
  return data;
}

// Every test runs on both backends.
class ExtentReaderTest : public ::testing::TestWithParam<Backend> {
 protected:
  // A reader on the backend under test; skips the test where the kernel refuses io_uring (the
  // reader would then read with pread threads, which the kPread run already covers).
  std::unique_ptr<ExtentReader> make_reader(const std::vector<std::string>& files, int in_flight = 0) {
    auto r = std::make_unique<ExtentReader>(files, in_flight, GetParam());
    if (r->backend() != GetParam()) return nullptr;
    return r;
  }
};

#define OPEN_OR_SKIP(var, ...)                                                  \
  auto var = make_reader(__VA_ARGS__);                                                 \
  if (!var) GTEST_SKIP() << "io_uring is not available here (the kernel refused it)"

TEST_P(ExtentReaderTest, ReadsRangesExactlyAcrossChunksAndTheFileEnd) {
  testing::TempDir tmp;
  // 20 MiB + 1234 bytes: several 8 MiB chunks and a last block cut by the end of the file.
  const std::string data = test_bytes(size_t{20} * 1024 * 1024 + 1234);
  testing::write_file(tmp.file("a"), data);
  testing::write_file(tmp.file("b"), data.substr(0, 5000));
  OPEN_OR_SKIP(reader, {tmp.file("a"), tmp.file("b")}, 3);
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
    reader->read(r.file, r.offset, r.length, buf.mem.get(), t, r.file == 1);
    t->wait();
    EXPECT_TRUE(t->done());
    const std::string& src = r.file == 0 ? data : data.substr(0, 5000);
    EXPECT_EQ(std::memcmp(buf.mem.get(), src.data() + r.offset, r.length), 0);
  }
  EXPECT_GE(reader->bytes_read(), 2 * size);
}

TEST_P(ExtentReaderTest, ManyRequestsInFlightAtOnce) {
  testing::TempDir tmp;
  const std::string data = test_bytes(size_t{40} * 1024 * 1024, 7);
  testing::write_file(tmp.file("a"), data);
  OPEN_OR_SKIP(reader, {tmp.file("a")}, 8);
  // 40 requests of 1 MiB and one of the whole file, all queued before any is waited for.
  Aligned whole(data.size());
  std::vector<Aligned> parts;
  std::vector<std::shared_ptr<ExtentReader::Ticket>> tickets;
  for (int i = 0; i < 40; ++i) {
    parts.emplace_back(1 << 20);
    tickets.push_back(std::make_shared<ExtentReader::Ticket>());
    reader->read(0, uint64_t(i) << 20, 1 << 20, parts.back().mem.get(), tickets.back(), i % 3 == 0);
  }
  auto all = std::make_shared<ExtentReader::Ticket>();
  reader->read(0, 0, data.size(), whole.mem.get(), all, false);
  for (int i = 0; i < 40; ++i) {
    tickets[size_t(i)]->wait();
    EXPECT_EQ(std::memcmp(parts[size_t(i)].mem.get(), data.data() + (size_t(i) << 20), 1 << 20), 0) << i;
  }
  all->wait();
  EXPECT_EQ(std::memcmp(whole.mem.get(), data.data(), data.size()), 0);
  EXPECT_EQ(reader->bytes_read(), 2 * data.size());
}

TEST_P(ExtentReaderTest, NamesTheFileThatShrankOrIsMissing) {
  testing::TempDir tmp;
  testing::write_file(tmp.file("a"), std::string(64 * 1024, 'x'));
  OPEN_OR_SKIP(reader, {tmp.file("a")});
  ASSERT_EQ(::truncate(tmp.file("a").c_str(), 4096), 0);
  Aligned buf(64 * 1024);
  auto t = std::make_shared<ExtentReader::Ticket>();
  reader->read(0, 32768, 32768, buf.mem.get(), t, false);
  const std::string err = testing::error_of([&] { t->wait(); });
  EXPECT_NE(err.find(tmp.file("a") + ": file shrank to 4096 bytes"), std::string::npos) << err;

  const std::string missing = testing::error_of([&] { ExtentReader r({tmp.file("nope")}, 0, GetParam()); });
  EXPECT_NE(missing.find(tmp.file("nope") + ": cannot open"), std::string::npos) << missing;
  // Unaligned requests are a caller's bug, refused by name.
  const std::string unaligned = testing::error_of(
      [&] { reader->read(0, 100, 10, buf.mem.get(), std::make_shared<ExtentReader::Ticket>(), false); });
  EXPECT_NE(unaligned.find("unaligned read"), std::string::npos) << unaligned;
}

TEST_P(ExtentReaderTest, NamesTheFileOfAReadError) {
  testing::TempDir tmp;
  // A directory opens but cannot be read (EISDIR): a read error from the kernel itself.
  const std::string dir = tmp.file("shard.safetensors");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  testing::write_file(tmp.file("ok"), test_bytes(8192));
  OPEN_OR_SKIP(reader, {tmp.file("ok"), dir});
  Aligned buf(2 * 8192);
  auto t = std::make_shared<ExtentReader::Ticket>();
  reader->read(0, 0, 8192, buf.mem.get(), t, false);
  reader->read(1, 0, 8192, buf.mem.get() + 8192, t, true);
  const std::string err = testing::error_of([&] { t->wait(); });
  EXPECT_NE(err.find(dir + ": read error at byte 0: "), std::string::npos) << err;
  EXPECT_TRUE(t->done());
  // The reader goes on serving the other file.
  auto ok = std::make_shared<ExtentReader::Ticket>();
  reader->read(0, 0, 8192, buf.mem.get(), ok, false);
  ok->wait();
  EXPECT_EQ(std::memcmp(buf.mem.get(), test_bytes(8192).data(), 8192), 0);
}

TEST_P(ExtentReaderTest, ServesUrgentRequestsBeforeBackgroundOnes) {
  testing::TempDir tmp;
  const std::string a(1 << 20, 'a'), b(1 << 20, 'b'), c(1 << 20, 'c');
  testing::write_file(tmp.file("a"), a);
  testing::write_file(tmp.file("b"), b);
  testing::write_file(tmp.file("c"), c);
  // One read at a time, so the order the chunks are served in decides what the shared buffer
  // holds at the end: the last chunk read into it wins.
  OPEN_OR_SKIP(reader, {tmp.file("a"), tmp.file("b"), tmp.file("c")}, 1);
  Aligned buf(1 << 20);
  auto bg = std::make_shared<ExtentReader::Ticket>(), urgent = std::make_shared<ExtentReader::Ticket>();
  reader->hold_for_testing(true);
  reader->read(0, 0, 1 << 20, buf.mem.get(), bg, false);     // background, queued first
  reader->read(1, 0, 1 << 20, buf.mem.get(), urgent, true);  // urgent, queued second
  reader->hold_for_testing(false);
  urgent->wait();
  bg->wait();
  EXPECT_EQ(std::memcmp(buf.mem.get(), a.data(), a.size()), 0) << "the background read ran before the urgent one";
  // Within one priority, first come first served.
  auto t = std::make_shared<ExtentReader::Ticket>();
  reader->hold_for_testing(true);
  reader->read(1, 0, 1 << 20, buf.mem.get(), t, true);
  reader->read(2, 0, 1 << 20, buf.mem.get(), t, true);
  reader->hold_for_testing(false);
  t->wait();
  EXPECT_EQ(std::memcmp(buf.mem.get(), c.data(), c.size()), 0);
}

TEST_P(ExtentReaderTest, ReadsTheHolesOfASparseFileAsZeros) {
  testing::TempDir tmp;
  // Data, a 12 MiB hole, data, and a hole to the end: 24 MiB in all.
  const std::string head = test_bytes(1 << 20, 1), mid = test_bytes(3 << 20, 2);
  const std::string path = tmp.file("sparse");
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, head.data(), head.size(), 0), ssize_t(head.size()));
    ASSERT_EQ(::pwrite(fd, mid.data(), mid.size(), 13 << 20), ssize_t(mid.size()));
    ASSERT_EQ(::ftruncate(fd, 24 << 20), 0);
    ::close(fd);
  }
  OPEN_OR_SKIP(reader, {path}, 2);
  Aligned buf(24 << 20);
  std::memset(buf.mem.get(), 0x5a, 24 << 20);
  auto t = std::make_shared<ExtentReader::Ticket>();
  reader->read(0, 0, 24 << 20, buf.mem.get(), t, false);
  t->wait();
  std::string want(24 << 20, '\0');
  want.replace(0, head.size(), head);
  want.replace(13 << 20, mid.size(), mid);
  EXPECT_EQ(std::memcmp(buf.mem.get(), want.data(), want.size()), 0);
  EXPECT_EQ(reader->bytes_read(), uint64_t{24} << 20);
}

TEST_P(ExtentReaderTest, FallsBackToBufferedReadsWhenDirectReadsFailWithEinval) {
  testing::TempDir tmp;
  const std::string data = test_bytes(size_t{18} * 1024 * 1024 + 100, 3);
  testing::write_file(tmp.file("a"), data);
  testing::write_file(tmp.file("b"), data.substr(0, 65536));
  OPEN_OR_SKIP(reader, {tmp.file("a"), tmp.file("b")}, 2);
  if (!reader->direct()) GTEST_SKIP() << "O_DIRECT is refused at open() under " << tmp.path();
  // The kernel's own EINVAL for an O_DIRECT read of a misaligned length (see the hook): what a
  // file system that accepts O_DIRECT at open() but not its reads answers to every read.
  reader->fail_next_direct_read_for_testing(0);
  Aligned buf(data.size() + 4096);
  auto t = std::make_shared<ExtentReader::Ticket>();
  reader->read(0, 0, data.size(), buf.mem.get(), t, false);
  t->wait();
  EXPECT_EQ(std::memcmp(buf.mem.get(), data.data(), data.size()), 0);
  EXPECT_FALSE(reader->direct());
  EXPECT_EQ(reader->bytes_read(), data.size());
  // Later reads of the file go through the page cache; the other file reads as before.
  auto t2 = std::make_shared<ExtentReader::Ticket>();
  reader->read(0, 4096, 8192, buf.mem.get(), t2, true);
  reader->read(1, 0, 65536, buf.mem.get() + 8192, t2, true);
  t2->wait();
  EXPECT_EQ(std::memcmp(buf.mem.get(), data.data() + 4096, 8192), 0);
  EXPECT_EQ(std::memcmp(buf.mem.get() + 8192, data.data(), 65536), 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, ExtentReaderTest, ::testing::Values(Backend::kPread, Backend::kUring),
                         [](const ::testing::TestParamInfo<Backend>& p) {
                           return p.param == Backend::kPread ? std::string("Pread") : std::string("Uring");
                         });

TEST(ExtentReader, PicksTheBackendByName) {
  EXPECT_EQ(ExtentReader::backend_named(nullptr), Backend::kAuto);
  EXPECT_EQ(ExtentReader::backend_named(""), Backend::kAuto);
  EXPECT_EQ(ExtentReader::backend_named("pread"), Backend::kPread);
  EXPECT_EQ(ExtentReader::backend_named("uring"), Backend::kUring);
  const std::string err = testing::error_of([] { ExtentReader::backend_named("aio"); });
  EXPECT_NE(err.find("K3_IO=aio: unknown checkpoint read backend (expected pread or uring)"), std::string::npos)
      << err;
  // kAuto reads with one of the two.
  testing::TempDir tmp;
  testing::write_file(tmp.file("a"), "x");
  ExtentReader reader({tmp.file("a")});
  EXPECT_NE(reader.backend(), Backend::kAuto);
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
