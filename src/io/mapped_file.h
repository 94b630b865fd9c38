// A read-only memory mapping of a whole file.  Weights stay in the page cache and are never
// copied wholesale into process memory; the OS pages them in on first touch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace k3 {

class MappedFile {
 public:
  // Throws k3::Error naming the path if the file cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace k3
