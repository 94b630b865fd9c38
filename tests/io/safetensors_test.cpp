// Safetensors: writer/reader round trip and every malformed-header case named by the issue.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <thread>

#include "base/error.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "support/test_support.h"

namespace k3 {
namespace {

using testing::list_dir;
using testing::TempDir;

// A raw file: 8-byte length, header text, then `data_bytes` bytes.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes, uint64_t claimed_len = 0) {
  std::string s(8, '\0');
  const uint64_t len = claimed_len != 0 ? claimed_len : header.size();
  std::memcpy(s.data(), &len, 8);
  s += header;
  s += std::string(data_bytes, '\x01');
  testing::write_file(path, s);
}

std::string open_error(const std::string& path) {
  try {
    SafetensorsFile f(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTripAllDtypes) {
  TempDir tmp;
  SafetensorsWriter w;
  w.add_f32("a.f32", {2, 3}, {1, 2, 3, 4, 5, 6});
  w.add_i32("b.i32", {3}, {7, -8, 9});
  w.add_bytes("c.u8", DType::kU8, {5}, {1, 2, 3, 4, 5});
  w.add_bytes("d.bf16", DType::kBF16, {2}, {0x80, 0x3f, 0x00, 0x40});
  w.add_bytes("e.f16", DType::kF16, {1}, {0x00, 0x3c});
  w.add_bytes("f.i8", DType::kI8, {3}, {0xff, 0x00, 0x7f});
  w.add_bytes("g.f8", DType::kF8E4M3, {2}, {0x38, 0xb8});
  w.add_bytes("h.empty", DType::kF32, {0, 4}, {});
  w.write(tmp.file("x.safetensors"));
  SafetensorsFile f(tmp.file("x.safetensors"));
  EXPECT_EQ(f.tensors().size(), 8u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(testing::read_f32(f, "a.f32"), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(testing::read_i32(f, "b.i32"), (std::vector<int32_t>{7, -8, 9}));
  const TensorView* u8 = f.find("c.u8");
  ASSERT_NE(u8, nullptr);
  EXPECT_EQ(u8->shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(u8->data[4], 5);
  EXPECT_EQ(f.find("g.f8")->dtype, DType::kF8E4M3);
  EXPECT_EQ(f.find("h.empty")->nbytes, 0u);
  // Wider types first, so every tensor is naturally aligned.
  for (const auto& [name, t] : f.tensors())
    if (t.nbytes != 0) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype), 0u) << name;
    }
}

TEST(Safetensors, WriterRejectsDuplicatesAndSizeMismatch) {
  SafetensorsWriter w;
  w.add_f32("a", {1}, {1.0f});
  EXPECT_THROW(w.add_f32("a", {1}, {2.0f}), Error);
  TempDir tmp;
  SafetensorsWriter bad;
  bad.add_bytes("x", DType::kF32, {2}, {1, 2, 3});
  EXPECT_THROW(bad.write(tmp.file("bad.safetensors")), Error);
}

struct BadCase {
  const char* label;
  std::string header;
  size_t data;
  uint64_t claimed_len;
  const char* expect;  // substring of the message
};

TEST(Safetensors, MalformedHeadersGiveClearErrors) {
  const std::vector<BadCase> cases = {
      {"header length past EOF", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4, 1u << 20,
       "runs past the end of the file"},
      {"invalid JSON", R"({"a":{"dtype":"F32",)", 0, 0, "not valid JSON"},
      {"not an object", R"([1,2,3])", 0, 0, "not a JSON object"},
      {"unknown dtype", R"({"a":{"dtype":"F4","shape":[1],"data_offsets":[0,1]}})", 1, 0, "unknown dtype 'F4'"},
      {"shape/bytes mismatch", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, 0,
       "needs 12 bytes but data_offsets span 8"},
      {"offsets past end (truncated data)", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 10, 0,
       "run past the end of the data section"},
      {"overlapping", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, 0, "overlap"},
      {"reversed offsets", R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", 4, 0, "reversed"},
      {"negative dim", R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", 0, 0, "not a non-negative integer"},
      {"duplicate name", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
       2, 0, "tensor 'a' appears twice in the header"},
      {"duplicate dotted name", R"({"m.w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"m.w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
       2, 0, "tensor 'm.w' appears twice in the header"},
      // The last of two dtypes used to win silently: the bytes were read as U8, not F32.
      {"duplicate field", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"dtype":"U8"}})", 4, 0,
       "key 'a.dtype' appears twice in the header"},
      {"missing offsets", R"({"a":{"dtype":"U8","shape":[1]}})", 1, 0, "data_offsets"},
      {"entry not object", R"({"a":5})", 0, 0, "entry is not an object"},
      {"huge shape", R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})", 4, 0,
       "too large"},
      // Zero elements, but TensorView::numel() multiplies in int64 and overflowed on the first two
      // dims (2^63): found by fuzz/safetensors_fuzz.cpp.
      {"empty tensor with a huge shape", R"({"a":{"dtype":"F32","shape":[4294967296,2147483648,0],"data_offsets":[0,0]}})",
       0, 0, "too large"},
      {"non-string metadata", R"({"__metadata__":{"format":123},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
       1, 0, "__metadata__ value \"format\" is 123, expected a string"},
      {"metadata not an object", R"({"__metadata__":[1]})", 0, 0, "__metadata__ is an array of 1 entry"},
      {"NUL after the JSON",
       std::string(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})") + std::string(1, '\0') + "junk {{{", 1,
       0, "NUL byte at offset 53"},
      {"NUL hiding a tensor",
       std::string(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})") + std::string(1, '\0') +
           R"(,"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
       1, 0, "NUL byte"},
      {"trailing NUL padding", std::string(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})") + std::string(3, '\0'),
       1, 0, "padded with trailing spaces only"},
      {"NUL in a tensor name", R"({"a\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1, 0,
       "tensor name \"a\\u0000b\" contains a NUL byte"},
      {"string shape entry", R"({"a":{"dtype":"U8","shape":["1"],"data_offsets":[0,1]}})", 1, 0,
       "shape entry \"1\" is not a non-negative integer"},
      // Sorted by start, the empty 'm' sits between 'a' and 'b'; it must not hide their overlap.
      {"overlap behind an empty tensor",
       R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"m":{"dtype":"U8","shape":[0],"data_offsets":[4,4]},)"
       R"("b":{"dtype":"U8","shape":[8],"data_offsets":[6,14]}})",
       14, 0, "tensors 'a' [0, 8) and 'b' [6, 14) overlap"},
      // The tensors must fill the data section exactly (the reference library's rule).
      {"gap between tensors",
       R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})",
       10, 0, "bytes [4, 6) of the data section belong to no tensor"},
      {"data before the first tensor", R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 6, 0,
       "bytes [0, 2) of the data section belong to no tensor"},
      {"bytes after the last tensor", R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 1000, 0,
       "996 bytes after the last tensor belong to no tensor"},
  };
  TempDir tmp;
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string path = tmp.file("bad.safetensors");
    write_raw(path, c.header, c.data, c.claimed_len);
    const std::string err = open_error(path);
    EXPECT_NE(err.find(c.expect), std::string::npos) << err;
    EXPECT_NE(err.find(path), std::string::npos) << "error must name the file: " << err;
  }
}

// Untrusted values nested 100,000 deep parse fine (nlohmann's parser is iterative) but must never
// be dumped whole into an error: dump() recurses per level and would overflow the stack.
TEST(Safetensors, DeeplyNestedValuesAreDescribedNotDumped) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  TempDir tmp;
  const std::string path = tmp.file("deep.safetensors");
  write_raw(path, R"({"a":{"dtype":"U8","shape":[)" + deep + R"(],"data_offsets":[0,1]}})", 1);
  std::string err = open_error(path);
  EXPECT_NE(err.find("shape entry an array of 1 entry is not a non-negative integer"), std::string::npos) << err;
  write_raw(path, R"({"__metadata__":{"x":)" + deep + R"(},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1);
  err = open_error(path);
  EXPECT_NE(err.find("__metadata__ value \"x\" is an array of 1 entry, expected a string"), std::string::npos) << err;
  write_raw(path, R"({"a":)" + deep + "}", 0);
  err = open_error(path);
  EXPECT_NE(err.find("tensor 'a': entry is not an object"), std::string::npos) << err;
}

// The format pads headers with trailing spaces; those and empty tensors anywhere stay accepted.
TEST(Safetensors, TrailingSpacesAndEmptyTensorsInsideOthersAreFine) {
  TempDir tmp;
  const std::string path = tmp.file("ok.safetensors");
  write_raw(path,
            std::string(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"e":{"dtype":"F32","shape":[0,3],)"
                        R"("data_offsets":[4,4]}})") + std::string(5, ' '),
            8);
  SafetensorsFile f(path);
  EXPECT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.find("e")->nbytes, 0u);
}

TEST(Safetensors, TooShortAndMissingFiles) {
  TempDir tmp;
  testing::write_file(tmp.file("short.safetensors"), "abc");
  EXPECT_NE(open_error(tmp.file("short.safetensors")).find("truncated"), std::string::npos);
  EXPECT_NE(open_error(tmp.file("none.safetensors")).find("cannot open"), std::string::npos);
  testing::write_file(tmp.file("empty.safetensors"), "");
  EXPECT_NE(open_error(tmp.file("empty.safetensors")).find("truncated"), std::string::npos);
}

TEST(Safetensors, ErrorNamesTheTensor) {
  TempDir tmp;
  write_raw(tmp.file("t.safetensors"), R"({"layer.7.w":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})", 4);
  EXPECT_NE(open_error(tmp.file("t.safetensors")).find("'layer.7.w'"), std::string::npos);
}

std::string write_error(const SafetensorsWriter& w, const std::string& path) {
  try {
    w.write(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

SafetensorsWriter small_writer() {
  SafetensorsWriter w;
  w.add_f32("x", {2}, {1.0f, 2.0f});
  return w;
}

// An empty --out and a directory are refused up front, leaving nothing behind (a directory used
// to get a "<dir>.tmp" file beside it; an empty name wrote "./.tmp").
TEST(SafetensorsWriter, RejectsEmptyPathAndDirectory) {
  TempDir tmp;
  ASSERT_EQ(::mkdir(tmp.file("d").c_str(), 0755), 0);
  const SafetensorsWriter w = small_writer();
  EXPECT_NE(write_error(w, "").find("output path is empty"), std::string::npos) << write_error(w, "");
  EXPECT_NE(write_error(w, tmp.file("d")).find(tmp.file("d") + ": is a directory"), std::string::npos);
  EXPECT_NE(write_error(w, tmp.file("d") + "/").find("is a directory name"), std::string::npos);
  EXPECT_NE(write_error(w, tmp.file("none/x.safetensors")).find("cannot create: No such file or directory"),
            std::string::npos);
  EXPECT_EQ(list_dir(tmp.path()), (std::set<std::string>{"d"}));
  EXPECT_TRUE(list_dir(tmp.file("d")).empty());
}

// The temporary is unique (mkstemp): a user's own "<name>.tmp" is neither overwritten nor
// deleted, and a symlink stays a symlink while the file it points to gets the new contents.
TEST(SafetensorsWriter, KeepsSymlinksAndUserTmpFiles) {
  TempDir tmp;
  testing::write_file(tmp.file("real.st"), "old");
  testing::write_file(tmp.file("real.st.tmp"), "mine");
  testing::write_file(tmp.file("link.st.tmp"), "mine too");
  ASSERT_EQ(::symlink("real.st", tmp.file("link.st").c_str()), 0);
  small_writer().write(tmp.file("link.st"));
  struct stat st {};
  ASSERT_EQ(::lstat(tmp.file("link.st").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  SafetensorsFile f(tmp.file("real.st"));
  EXPECT_NE(f.find("x"), nullptr);
  EXPECT_EQ(testing::read_file(tmp.file("real.st.tmp")), "mine");
  EXPECT_EQ(testing::read_file(tmp.file("link.st.tmp")), "mine too");
  EXPECT_EQ(list_dir(tmp.path()), (std::set<std::string>{"real.st", "real.st.tmp", "link.st", "link.st.tmp"}));
  // A new file gets ordinary permissions (mkstemp's are 0600), an existing one keeps its own.
  ASSERT_EQ(::chmod(tmp.file("real.st").c_str(), 0640), 0);
  small_writer().write(tmp.file("real.st"));
  ASSERT_EQ(::stat(tmp.file("real.st").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  const mode_t mask = ::umask(022);
  ::umask(mask);
  small_writer().write(tmp.file("new.st"));
  ASSERT_EQ(::stat(tmp.file("new.st").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u & ~mask);
  // A symlink to nothing is refused rather than guessed through.
  ASSERT_EQ(::symlink("missing/x.st", tmp.file("dangling.st").c_str()), 0);
  EXPECT_NE(write_error(small_writer(), tmp.file("dangling.st")).find("dangling symlink"), std::string::npos);
}

// A failure part way (here a fill that throws) removes the temporary and keeps the old file.
TEST(SafetensorsWriter, FailureLeavesNoTemporary) {
  TempDir tmp;
  testing::write_file(tmp.file("out.st"), "old contents");
  SafetensorsWriter w;
  w.add_f32("a", {1}, {1.0f});
  w.add("b", DType::kF32, {4}, [](uint8_t*, size_t) { fail("fill failed on purpose"); });
  EXPECT_NE(write_error(w, tmp.file("out.st")).find("fill failed on purpose"), std::string::npos);
  EXPECT_EQ(list_dir(tmp.path()), (std::set<std::string>{"out.st"}));
  EXPECT_EQ(testing::read_file(tmp.file("out.st")), "old contents");
}

// Something that exists but is not a regular file (a FIFO here; a device such as /dev/null, or
// /dev/stdout) is written in place: renaming over it would destroy it (--out /dev/full once
// replaced the device node with a regular file).
TEST(SafetensorsWriter, NonRegularTargetIsWrittenInPlace) {
  TempDir tmp;
  const std::string pipe = tmp.file("pipe");
  ASSERT_EQ(::mkfifo(pipe.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] {
    const int fd = ::open(pipe.c_str(), O_RDONLY);
    if (fd < 0) return;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
    ::close(fd);
  });
  small_writer().write(pipe);
  reader.join();
  struct stat st {};
  ASSERT_EQ(::lstat(pipe.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(list_dir(tmp.path()), (std::set<std::string>{"pipe"}));
  ASSERT_GE(got.size(), 8u);
  uint64_t len = 0;
  std::memcpy(&len, got.data(), 8);
  EXPECT_EQ(got.size(), 8 + len + 8);  // header, then the two floats
}

}  // namespace
}  // namespace k3
