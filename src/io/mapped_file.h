// A read-only view of a whole file, in one of two residencies:
//   kMapped: a shared mapping of the page cache; the OS pages weights in on first touch and may
//            drop them again, so a checkpoint larger than RAM still runs (streaming from disk).
//   kMemory: the file read once into anonymous memory backed by transparent huge pages.  Decode
//            streams every weight once per token, and 4 KiB page-cache pages cost it dearly: the
//            hardware prefetchers stop at every page boundary and each page needs its own TLB
//            entry, so a mapped checkpoint decodes at a fraction of the in-memory speed.  Needs
//            RAM for the whole file.
// kAuto picks kMemory when the files fit comfortably in the memory available (Checkpoint).
// A kMapped file that shrinks while mapped makes the next touch of a page past its new end fault
// (SIGBUS).  The first kMapped file installs a SIGBUS handler that names the file ("changed or
// was truncated while mapped; use --weights memory") and exits with status 1, instead of the
// process dying silently; faults elsewhere keep their previous (default) handling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace k3 {

// kStreamed: a checkpoint's files are mapped for their headers and small tensors only; the
// matrices are read with direct I/O into memory the weight store manages within a budget
// (model/weight_store.h).  MappedFile itself knows only kMemory and kMapped.
enum class Residency { kAuto, kMemory, kMapped, kStreamed };

// "auto", "memory", "mmap" or "stream"; throws k3::Error naming the value otherwise.
Residency parse_residency(const std::string& name);
const char* residency_name(Residency r);
// The process-wide choice for checkpoints opened without an explicit one (k3 --weights, or the
// K3_WEIGHTS environment variable; default kAuto).
void set_default_residency(Residency r);
Residency default_residency();

// The memory streamed weights may use (k3 --weight-budget, or K3_WEIGHT_BUDGET); 0 = not set
// (kStreamed then takes 3/4 of the memory available).  A budget implies kStreamed.
void set_default_weight_budget(uint64_t bytes);
uint64_t default_weight_budget();
// The memory weights and sequence state may use together (k3 --memory-budget, or
// K3_MEMORY_BUDGET); 0 = not set.  Model::load splits it (model/k3_model.h).
void set_default_memory_budget(uint64_t bytes);
uint64_t default_memory_budget();
// "64G", "1.5T", "512M", "4096" (bytes; K/M/G/T are powers of 1024, an optional trailing "B" or
// "iB" is allowed) or "40%" (of the memory available now); throws k3::Error naming the text.
uint64_t parse_byte_size(const std::string& text);

class MappedFile {
 public:
  // Throws k3::Error naming the path if the file cannot be opened, mapped or read.  kAuto is
  // taken as kMapped here (the choice between the two is made for a whole checkpoint).  In
  // kMemory, file byte `align_offset` lands on a 64-byte boundary (a safetensors data section:
  // its tensors then start on cache lines, so 64-byte kernel loads do not split).
  explicit MappedFile(const std::string& path, Residency residency = Residency::kMapped, size_t align_offset = 0);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  Residency residency() const { return residency_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* base_ = nullptr;  // start of the mapping (data_ may sit up to 63 bytes into it)
  size_t mapped_ = 0;     // length of the mapping (rounded up to huge pages in kMemory)
  Residency residency_ = Residency::kMapped;
  int guard_ = -1;        // kMapped: this mapping's slot in the SIGBUS registry (-1: none)
};

}  // namespace k3
