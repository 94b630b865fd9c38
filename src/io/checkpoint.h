// A checkpoint directory as Hugging Face lays it out: config.json plus either one
// model.safetensors or sharded model-000NN-of-000MM.safetensors files named by
// model.safetensors.index.json.  All shards are opened and validated up front, either mapped
// from the page cache or read into huge-page memory (io/mapped_file.h: Residency); kAuto reads
// them into memory when they fit in 3/4 of the memory available, else maps them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace k3 {

class Checkpoint {
 public:
  // Throws k3::Error naming the directory, index, shard or tensor at fault.
  explicit Checkpoint(const std::string& dir, Residency residency = default_residency());

  const std::string& dir() const { return dir_; }
  // nullptr if absent.
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, const TensorView*>& tensors() const { return tensors_; }
  size_t shard_count() const { return shards_.size(); }
  uint64_t total_bytes() const;
  Residency residency() const { return residency_; }  // kMemory or kMapped, as resolved

 private:
  std::string dir_;
  Residency residency_ = Residency::kMapped;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, const TensorView*> tensors_;
};

// Reads a whole (small) text file; throws k3::Error naming the path.
std::string read_text_file(const std::string& path);
bool file_exists(const std::string& path);

}  // namespace k3
