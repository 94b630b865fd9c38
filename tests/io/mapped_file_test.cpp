// MappedFile's two residencies give the same bytes; the residency names parse or are refused.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/checkpoint.h"
#include "io/mapped_file.h"
#include "io/safetensors_writer.h"
#include "support/test_support.h"

namespace k3 {
namespace {

using testing::TempDir;

std::string pattern(size_t n) {
  std::string s(n, '\0');
  uint32_t v = 12345;
  for (auto& c : s) {
    v = v * 1103515245u + 12345u;
    c = static_cast<char>(v >> 24);
  }
  return s;
}

TEST(MappedFile, MemoryAndMappedHoldTheSameBytes) {
  TempDir tmp;
  // Not a multiple of the 2 MiB huge page, nor of the 64 MiB read chunk; and tiny.
  for (size_t n : {size_t{1}, size_t{4095}, (size_t{3} << 20) + 17}) {
    const std::string bytes = pattern(n);
    testing::write_file(tmp.file("f.bin"), bytes);
    MappedFile mapped(tmp.file("f.bin"), Residency::kMapped);
    MappedFile memory(tmp.file("f.bin"), Residency::kMemory);
    EXPECT_EQ(mapped.residency(), Residency::kMapped);
    EXPECT_EQ(memory.residency(), Residency::kMemory);
    ASSERT_EQ(mapped.size(), n);
    ASSERT_EQ(memory.size(), n);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(memory.data()), n), bytes);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(mapped.data()), n), bytes);
  }
}

TEST(MappedFile, MemoryResidencyAlignsTheRequestedOffset) {
  TempDir tmp;
  const std::string bytes = pattern(5000);
  testing::write_file(tmp.file("f.bin"), bytes);
  for (size_t off : {size_t{0}, size_t{8}, size_t{63}, size_t{64}, size_t{1000}}) {
    MappedFile m(tmp.file("f.bin"), Residency::kMemory, off);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(m.data() + off) % 64, 0u) << off;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(m.data()), m.size()), bytes) << off;
  }
}

TEST(MappedFile, EmptyAndMissingFiles) {
  TempDir tmp;
  testing::write_file(tmp.file("empty"), "");
  MappedFile e(tmp.file("empty"), Residency::kMemory);
  EXPECT_EQ(e.size(), 0u);
  EXPECT_EQ(e.data(), nullptr);
  try {
    MappedFile m(tmp.file("absent"), Residency::kMemory);
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("absent"), std::string::npos) << err.what();
  }
}

TEST(MappedFile, ResidencyNames) {
  EXPECT_EQ(parse_residency("auto"), Residency::kAuto);
  EXPECT_EQ(parse_residency("memory"), Residency::kMemory);
  EXPECT_EQ(parse_residency("mmap"), Residency::kMapped);
  for (Residency r : {Residency::kAuto, Residency::kMemory, Residency::kMapped})
    EXPECT_EQ(parse_residency(residency_name(r)), r);
  try {
    parse_residency("fast");
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("'fast'"), std::string::npos) << err.what();
  }
}

TEST(MappedFile, CheckpointInEitherResidencyServesTheSameTensors) {
  TempDir tmp;
  SafetensorsWriter w;
  std::vector<float> a(16), b(32);  // whole multiples of 64 bytes: every data offset one too
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.5f * static_cast<float>(i) - 3.0f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 1.0f / static_cast<float>(i + 1);
  w.add_f32("a", {16}, a);
  w.add_f32("b", {4, 8}, b);
  w.write(tmp.file("model.safetensors"));
  Checkpoint mapped(tmp.path(), Residency::kMapped), memory(tmp.path(), Residency::kMemory);
  Checkpoint autos(tmp.path(), Residency::kAuto);
  EXPECT_EQ(mapped.residency(), Residency::kMapped);
  EXPECT_EQ(memory.residency(), Residency::kMemory);
  EXPECT_EQ(autos.residency(), Residency::kMemory);  // a few bytes always fit
  for (const char* name : {"a", "b"}) {
    const TensorView* x = mapped.find(name);
    const TensorView* y = memory.find(name);
    ASSERT_NE(x, nullptr);
    ASSERT_NE(y, nullptr);
    ASSERT_EQ(x->nbytes, y->nbytes);
    EXPECT_NE(x->data, y->data);
    // Tensors at 64-byte multiples of the data section start on cache lines in memory,
    // whatever the header length.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(y->data) % 64, 0u) << name;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(x->data), x->nbytes),
              std::string(reinterpret_cast<const char*>(y->data), y->nbytes));
  }
}

// A shard truncated while mapped (--weights mmap) faults with SIGBUS on the next touch past its
// new end; the handler names the file and exits 1 instead of the process dying of the signal.
TEST(MappedFileDeathTest, TruncatedWhileMappedNamesTheFile) {
  TempDir tmp;
  const std::string path = tmp.file("shard.safetensors");
  testing::write_file(path, pattern(3 * 4096 + 100));
  EXPECT_EXIT(
      {
        MappedFile m(path, Residency::kMapped);
        if (::truncate(path.c_str(), 0) != 0) std::_Exit(2);
        volatile uint8_t byte = m.data()[2 * 4096 + 5];
        (void)byte;
        std::_Exit(0);  // not reached: the touch above faults
      },
      ::testing::ExitedWithCode(1),
      "k3: error: checkpoint file .*shard\\.safetensors changed or was truncated while mapped; use --weights "
      "memory");
}

// A SIGBUS that is not a fault inside a mapping (here: sent with raise) keeps its default action.
TEST(MappedFileDeathTest, OtherSigbusStillKills) {
#if defined(__SANITIZE_ADDRESS__)
  // Under ASan the previous SIGBUS handler, to which k3's passes other faults on, is ASan's own:
  // it reports the signal and exits instead of letting the default action kill the process.
  GTEST_SKIP() << "AddressSanitizer handles SIGBUS itself";
#endif
  TempDir tmp;
  testing::write_file(tmp.file("f.bin"), pattern(4096));
  EXPECT_EXIT(
      {
        MappedFile m(tmp.file("f.bin"), Residency::kMapped);
        ::raise(SIGBUS);
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace
}  // namespace k3
