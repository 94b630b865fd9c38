// The safetensors header (io/safetensors.h): the input is a whole .safetensors file, opened both
// mapped and read into memory.
// Properties: opening returns or throws k3::Error; both residencies reach the same verdict (the
// same message, or the same tensors with the same bytes); an accepted file's tensors lie inside
// the data section, each spans exactly shape x dtype size bytes, and together they cover the
// section without overlapping.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "fuzz_support.h"
#include "io/safetensors.h"

namespace {

using namespace k3;

// What opening the file gave: the error message, or nothing and the file.
struct Verdict {
  std::string error;
  std::optional<SafetensorsFile> file;
};

Verdict open_file(const std::string& path, Residency residency) {
  Verdict v;
  try {
    v.file.emplace(path, residency);
  } catch (const Error& e) {
    v.error = e.what();
  }
  return v;
}

void check_accepted(const SafetensorsFile& f, const uint8_t* data, size_t file_size) {
  K3_FUZZ_ASSERT(file_size >= 8, "an accepted file of ", file_size, " bytes");
  uint64_t header_len = 0;
  std::memcpy(&header_len, data, 8);
  const uint64_t data_start = 8 + header_len;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& [name, t] : f.tensors()) {
    K3_FUZZ_ASSERT(name == t.name, "tensor '", name, "' names itself '", t.name, "'");
    K3_FUZZ_ASSERT(t.offset + t.nbytes <= file_size, "tensor '", name, "' ends past the file");
    K3_FUZZ_ASSERT(static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype) == t.nbytes, "tensor '", name,
                   "': shape ", t.shape_str(), " does not match its ", t.nbytes, " bytes");
    if (t.nbytes > 0) spans.emplace_back(t.offset, t.offset + t.nbytes);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t covered = data_start;
  for (const auto& [begin, end] : spans) {
    K3_FUZZ_ASSERT(begin == covered, "a gap or overlap at byte ", begin);
    covered = end;
  }
  K3_FUZZ_ASSERT(covered == file_size, "the tensors end at byte ", covered, " of ", file_size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::scratch_dir() + "/model.safetensors";
  fuzz::write_file(path, fuzz::as_text(data, size));
  const Verdict mapped = open_file(path, Residency::kMapped);
  const Verdict memory = open_file(path, Residency::kMemory);
  K3_FUZZ_ASSERT(mapped.error == memory.error, "mapped: '", mapped.error, "', in memory: '", memory.error, "'");
  if (!mapped.file) return 0;
  check_accepted(*mapped.file, data, size);
  const auto& a = mapped.file->tensors();
  const auto& b = memory.file->tensors();
  K3_FUZZ_ASSERT(a.size() == b.size(), a.size(), " tensors mapped, ", b.size(), " in memory");
  for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j) {
    K3_FUZZ_ASSERT(i->first == j->first && i->second.offset == j->second.offset && i->second.nbytes == j->second.nbytes,
                   "tensor '", i->first, "' differs between the residencies");
    K3_FUZZ_ASSERT(std::memcmp(i->second.data, j->second.data, i->second.nbytes) == 0, "tensor '", i->first,
                   "' has other bytes in memory than mapped");
    K3_FUZZ_ASSERT(std::memcmp(i->second.data, data + i->second.offset, i->second.nbytes) == 0, "tensor '", i->first,
                   "' does not point at its bytes of the input");
  }
  K3_FUZZ_ASSERT(mapped.file->metadata() == memory.file->metadata(), "the metadata differs between the residencies");
  return 0;
}
