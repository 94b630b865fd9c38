// Safetensors: writer/reader round trip and every malformed-header case named by the issue.
#include <gtest/gtest.h>

#include <cstring>

#include "base/error.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "support/test_support.h"

namespace k3 {
namespace {

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
       2, 0, "appears twice"},
      {"missing offsets", R"({"a":{"dtype":"U8","shape":[1]}})", 1, 0, "data_offsets"},
      {"entry not object", R"({"a":5})", 0, 0, "entry is not an object"},
      {"huge shape", R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})", 4, 0,
       "too large"},
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

}  // namespace
}  // namespace k3
