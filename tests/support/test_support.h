// Shared helpers for k3's tests: where the fixtures are, scratch directories, and running the
// `k3` executable as a user would.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/safetensors.h"

namespace k3::testing {

// The message of the k3::Error that fn throws ("" when it throws none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A golden fixture folder (e.g. "k3-tiny-a"): the byte-identical copy under tests/data/fixtures.
std::string fixture_dir(const std::string& name);
// The trained demo model shipped in models/k3-demo (train/ builds it; the PyTorch trainer's own
// outputs on it are in tests/data/k3-demo).
std::string demo_model_dir();
// A file under tests/data (e.g. "k3-demo/golden.safetensors").
std::string test_data_path(const std::string& relative);
// K3_SHARED_FIXTURES_DIR/<name> when present (for the identity check), else "".
std::string shared_fixture_dir(const std::string& name);

// A fresh empty directory, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `k3 <args>` (args are passed through /bin/sh; quote as needed).
CommandResult run_k3(const std::string& args, const std::string& stdin_text = "");
std::string k3_binary();

// Reads an F32 tensor into a vector (asserts dtype).
std::vector<float> read_f32(const SafetensorsFile& f, const std::string& name);
std::vector<int32_t> read_i32(const SafetensorsFile& f, const std::string& name);

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& data);
void copy_dir(const std::string& from, const std::string& to);
// The names in a directory (without "." and ".."); empty when it cannot be read.
std::set<std::string> list_dir(const std::string& dir);

// Rewrites a safetensors file tensor by tensor: `edit` may change a tensor's dtype, shape and
// bytes (no consistency checks: tests use it to corrupt files) or return false to drop it.
struct TensorEdit {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
// `prepend` tensors are written first (an odd-sized one misaligns everything after it).
void rewrite_safetensors(const std::string& path, const std::function<bool(TensorEdit&)>& edit,
                         const std::vector<TensorEdit>& prepend = {});

// In a sharded checkpoint directory: the shard file holding `tensor` (from the index).
std::string shard_of(const std::string& dir, const std::string& tensor);
// Removes a tensor from its shard and from the index.
void drop_tensor(const std::string& dir, const std::string& tensor);

}  // namespace k3::testing
