// Checkpoint directories: single file, sharded with index, and broken indexes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "io/checkpoint.h"
#include "io/safetensors_writer.h"
#include "support/test_support.h"

namespace k3 {
namespace {

using testing::TempDir;

std::string load_error(const std::string& dir) {
  try {
    Checkpoint c(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void write_shard(const std::string& path, const std::vector<std::string>& names) {
  SafetensorsWriter w;
  for (const auto& n : names) w.add_f32(n, {2}, {1.0f, 2.0f});
  w.write(path);
}

TEST(Checkpoint, SingleFile) {
  TempDir tmp;
  write_shard(tmp.file("model.safetensors"), {"a", "b"});
  Checkpoint c(tmp.path());
  EXPECT_EQ(c.shard_count(), 1u);
  EXPECT_NE(c.find("a"), nullptr);
  EXPECT_EQ(c.find("zzz"), nullptr);
  EXPECT_EQ(c.total_bytes(), 16u);
}

TEST(Checkpoint, ShardedWithIndex) {
  TempDir tmp;
  write_shard(tmp.file("model-00001-of-000002.safetensors"), {"a", "b"});
  write_shard(tmp.file("model-00002-of-000002.safetensors"), {"c"});
  testing::write_file(tmp.file("model.safetensors.index.json"),
                      R"({"metadata":{"total_size":24},"weight_map":{"a":"model-00001-of-000002.safetensors",
                      "b":"model-00001-of-000002.safetensors","c":"model-00002-of-000002.safetensors"}})");
  Checkpoint c(tmp.path());
  EXPECT_EQ(c.shard_count(), 2u);
  EXPECT_EQ(c.tensors().size(), 3u);
  EXPECT_NE(c.find("c")->file->find("00002"), std::string::npos);
}

TEST(Checkpoint, IndexNamingAMissingShard) {
  TempDir tmp;
  write_shard(tmp.file("model-00001-of-000002.safetensors"), {"a"});
  testing::write_file(tmp.file("model.safetensors.index.json"),
                      R"({"weight_map":{"a":"model-00001-of-000002.safetensors","b":"model-00002-of-000002.safetensors"}})");
  const std::string err = load_error(tmp.path());
  EXPECT_NE(err.find("shard 'model-00002-of-000002.safetensors'"), std::string::npos) << err;
  EXPECT_NE(err.find("does not exist"), std::string::npos) << err;
}

TEST(Checkpoint, IndexMapsTensorToWrongShard) {
  TempDir tmp;
  write_shard(tmp.file("s1.safetensors"), {"a"});
  testing::write_file(tmp.file("model.safetensors.index.json"), R"({"weight_map":{"a":"s1.safetensors","zz":"s1.safetensors"}})");
  EXPECT_NE(load_error(tmp.path()).find("maps tensor 'zz'"), std::string::npos);
}

TEST(Checkpoint, BadIndexes) {
  TempDir tmp;
  write_shard(tmp.file("s1.safetensors"), {"a"});
  testing::write_file(tmp.file("model.safetensors.index.json"), "{not json");
  EXPECT_NE(load_error(tmp.path()).find("not valid JSON"), std::string::npos);
  testing::write_file(tmp.file("model.safetensors.index.json"), R"({"metadata":{}})");
  EXPECT_NE(load_error(tmp.path()).find("weight_map"), std::string::npos);
  testing::write_file(tmp.file("model.safetensors.index.json"), R"({"weight_map":{"a":"../etc/passwd"}})");
  EXPECT_NE(load_error(tmp.path()).find("invalid shard"), std::string::npos);
  testing::write_file(tmp.file("model.safetensors.index.json"), R"({"weight_map":{"a":5}})");
  EXPECT_NE(load_error(tmp.path()).find("not a file name"), std::string::npos);
  // One tensor mapped to two shards: nlohmann kept the second mapping without a word.
  testing::write_file(tmp.file("model.safetensors.index.json"),
                      R"({"weight_map":{"a":"s0.safetensors","a":"s1.safetensors"}})");
  EXPECT_NE(load_error(tmp.path()).find("model.safetensors.index.json: key 'weight_map.a' appears twice"),
            std::string::npos);
}

TEST(Checkpoint, NulBytesInTheIndex) {
  TempDir tmp;
  write_shard(tmp.file("s1.safetensors"), {"a"});
  // nlohmann would stop at the NUL and never see the second (broken) entry.
  testing::write_file(tmp.file("model.safetensors.index.json"),
                      std::string(R"({"weight_map":{"a":"s1.safetensors"}})") + std::string(1, '\0') + R"(,"b":5})");
  std::string err = load_error(tmp.path());
  EXPECT_NE(err.find("model.safetensors.index.json: contains a NUL byte at offset 37"), std::string::npos) << err;
  testing::write_file(tmp.file("model.safetensors.index.json"), R"({"weight_map":{"a":"s1.safetensors\u0000../x"}})");
  err = load_error(tmp.path());
  EXPECT_NE(err.find("weight_map entry 'a' names a shard file containing a NUL byte: \"s1.safetensors\\u0000../x\""),
            std::string::npos)
      << err;
  testing::write_file(tmp.file("model.safetensors.index.json"), R"({"weight_map":{"a\u0000b":"s1.safetensors"}})");
  err = load_error(tmp.path());
  EXPECT_NE(err.find("weight_map key \"a\\u0000b\" contains a NUL byte"), std::string::npos) << err;
}

TEST(Checkpoint, ShardThatIsNotARegularFile) {
  TempDir tmp;
  write_shard(tmp.file("s1.safetensors"), {"a"});
  ASSERT_EQ(::mkdir(tmp.file("dir.safetensors").c_str(), 0755), 0);
  ASSERT_EQ(::mkfifo(tmp.file("fifo.safetensors").c_str(), 0644), 0);
  for (const char* shard : {"dir.safetensors", "fifo.safetensors"}) {
    SCOPED_TRACE(shard);
    testing::write_file(tmp.file("model.safetensors.index.json"),
                        std::string(R"({"weight_map":{"a":"s1.safetensors","b":")") + shard + R"("}})");
    const std::string err = load_error(tmp.path());
    EXPECT_NE(err.find(std::string("shard '") + shard + "'"), std::string::npos) << err;
    EXPECT_NE(err.find("is not a regular file"), std::string::npos) << err;
  }
}

TEST(Checkpoint, SameTensorInTwoShards) {
  TempDir tmp;
  write_shard(tmp.file("s1.safetensors"), {"a"});
  write_shard(tmp.file("s2.safetensors"), {"a", "b"});
  testing::write_file(tmp.file("model.safetensors.index.json"), R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  EXPECT_NE(load_error(tmp.path()).find("is in both"), std::string::npos);
}

TEST(Checkpoint, NoWeightsOrNotADirectory) {
  TempDir tmp;
  EXPECT_NE(load_error(tmp.path()).find("no model.safetensors"), std::string::npos);
  EXPECT_NE(load_error(tmp.file("nope")).find("not a directory"), std::string::npos);
}

std::string read_error(const std::string& path) {
  return testing::error_of([&] { read_text_file(path); });
}

// Every way a config file cannot be read says why (not just "cannot open", and a directory is not
// read as empty text that then fails as "not valid JSON").
TEST(Checkpoint, ReadTextFileSaysWhy) {
  TempDir tmp;
  ASSERT_EQ(::mkdir(tmp.file("dir.json").c_str(), 0755), 0);
  EXPECT_NE(read_error(tmp.file("dir.json")).find("dir.json: cannot read: is a directory"), std::string::npos)
      << read_error(tmp.file("dir.json"));
  EXPECT_NE(read_error(tmp.file("none.json")).find("none.json: cannot open: No such file or directory"),
            std::string::npos);
  testing::write_file(tmp.file("afile"), "x");
  EXPECT_NE(read_error(tmp.file("afile") + "/config.json").find("cannot open: Not a directory"), std::string::npos);
  ASSERT_EQ(::symlink("loop.json", tmp.file("loop.json").c_str()), 0);
  EXPECT_NE(read_error(tmp.file("loop.json")).find("cannot open: Too many levels of symbolic links"),
            std::string::npos);
  if (::geteuid() != 0) {  // root reads a mode-000 file regardless
    testing::write_file(tmp.file("locked.json"), "{}");
    ASSERT_EQ(::chmod(tmp.file("locked.json").c_str(), 0), 0);
    EXPECT_NE(read_error(tmp.file("locked.json")).find("cannot open: Permission denied"), std::string::npos);
  }
  testing::write_file(tmp.file("ok.json"), std::string("{\"a\":\0 1}", 9));
  EXPECT_EQ(read_text_file(tmp.file("ok.json")), std::string("{\"a\":\0 1}", 9));  // every byte, NULs included
}

}  // namespace
}  // namespace k3
