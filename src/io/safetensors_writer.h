// Writing safetensors files.  Tensors are declared first (name, dtype, shape, and a function
// that fills the bytes); write() lays them out contiguously with the widest element types first
// so every tensor is naturally aligned, then streams them one at a time (a checkpoint never has
// to fit in memory at once).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/dtype.h"

namespace k3 {

class SafetensorsWriter {
 public:
  using Fill = std::function<void(uint8_t* dst, size_t nbytes)>;

  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, Fill fill);
  // Convenience: copies the given bytes (must equal shape x dtype size).
  void add_bytes(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  void add_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values);
  void add_i32(const std::string& name, std::vector<int64_t> shape, const std::vector<int32_t>& values);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

  // Total bytes of tensor data declared so far.
  uint64_t data_bytes() const;
  size_t size() const { return entries_.size(); }
  std::vector<std::string> names() const;

  // Writes the file.  A new or existing regular file is written atomically: to a unique
  // temporary (mkstemp) in the same directory, then renamed over it; on any failure the temporary
  // is removed and the old file is untouched.  A symlink to a regular file keeps being a symlink
  // (its target is replaced); a dangling symlink is refused.  An existing non-regular file (a
  // device such as /dev/null, a FIFO, /dev/stdout) is written in place, never replaced.  An empty
  // path or a directory is refused.  Throws k3::Error naming the path and the system's reason.
  // `on_tensor` is called after each tensor is written (for progress).
  void write(const std::string& path, const std::function<void(uint64_t bytes)>& on_tensor = {}) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t nbytes;
    Fill fill;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_{{"format", "pt"}};
};

}  // namespace k3
