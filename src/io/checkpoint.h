// A checkpoint directory as Hugging Face lays it out: config.json plus either one
// model.safetensors or sharded model-000NN-of-000MM.safetensors files named by
// model.safetensors.index.json.  All shards are opened and validated up front, either mapped
// from the page cache or read into huge-page memory (io/mapped_file.h: Residency); kAuto reads
// them into memory when they fit in 3/4 of the memory available, else streams them (kStreamed:
// the files are mapped for their headers and small tensors, and model/weight_store.h reads the
// matrices within a memory budget).  Shards open in parallel.
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
  // auto_limit: with kAuto, the most bytes of files read into memory (0: 3/4 of the memory
  // available); a memory budget passes the weights' part of it.
  explicit Checkpoint(const std::string& dir, Residency residency = default_residency(), uint64_t auto_limit = 0);

  const std::string& dir() const { return dir_; }
  // nullptr if absent.
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, const TensorView*>& tensors() const { return tensors_; }
  size_t shard_count() const { return shards_.size(); }
  // The paths of the shard files (each TensorView::file points to one of these strings).
  std::vector<std::string> shard_paths() const;
  uint64_t total_bytes() const;
  Residency residency() const { return residency_; }  // kMemory, kMapped or kStreamed, as resolved

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
