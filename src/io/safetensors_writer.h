// Writing safetensors files.  Tensors are declared first (name, dtype, shape, and a function
// that fills the bytes); write() lays them out contiguously with the widest element types first
// (tensors of one element size keep their declaration order, so tensors declared together stay
// adjacent) so every tensor is naturally aligned, then streams them one at a time (a checkpoint
// never has to fit in memory at once).  A tensor without a fill function is all zeros and is left
// as a hole in the file (nothing written, no disk blocks), so a file of only such tensors costs
// its header on disk whatever its size.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "io/dtype.h"

namespace k3 {

class SafetensorsWriter {
 public:
  using Fill = std::function<void(uint8_t* dst, size_t nbytes)>;

  // `fill` may be empty: the tensor is zeros, written as a file hole.
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
  // `on_tensor` is called after each tensor is written (for progress).  Tensors without a fill
  // are holes in the temporary file (its size set by ftruncate); output written in place (a
  // device, a FIFO, /dev/stdout) gets their zeros written out instead.
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
  std::unordered_set<std::string> names_;  // duplicate check without a scan per add
  std::map<std::string, std::string> metadata_{{"format", "pt"}};
};

// Writes `data` to `path` with the same atomic replacement as SafetensorsWriter::write (a
// temporary beside it, renamed over it once complete).  Throws k3::Error naming the path.
void write_file_atomically(const std::string& path, std::string_view data);

}  // namespace k3
