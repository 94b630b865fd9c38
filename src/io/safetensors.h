// Reading safetensors files: one memory-mapped file whose header has been fully validated
// (well-formed JSON object, known dtypes, shape x dtype size == byte length, offsets inside
// the data section and not overlapping, no duplicate names).  Errors name file and tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/dtype.h"
#include "io/mapped_file.h"

namespace k3 {

// A tensor inside a mapped file.  `data` points into the mapping; it is only naturally aligned
// when the writer laid the file out that way, so consumers needing aligned access copy it.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  const std::string* file = nullptr;  // path of the file holding it
  uint64_t offset = 0;                // where its bytes start in that file (for direct reads)

  int64_t numel() const;
  std::string shape_str() const;  // "[3072, 1792]"
};

class SafetensorsFile {
 public:
  // Maps (or reads into memory, io/mapped_file.h) and validates; throws k3::Error
  // ("<path>: tensor 'x': ...") on any problem.
  explicit SafetensorsFile(const std::string& path, Residency residency = Residency::kMapped);

  const std::string& path() const { return file_->path(); }
  Residency residency() const { return file_->residency(); }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorView* find(const std::string& name) const;

 private:
  std::unique_ptr<MappedFile> file_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace k3
