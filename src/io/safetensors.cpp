#include "io/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/json_document.h"
#include "io/json_preview.h"

namespace k3 {

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {

using nlohmann::json;

// Reads a JSON integer that must be a non-negative value representable as uint64.
bool as_u64(const json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

}  // namespace

namespace {
// 8 + the header length: where the data section starts (0 if unreadable; the validation of
// the opened file reports that).  Read ahead of opening, so kMemory can align the section.
size_t data_section_offset(const std::string& path) {
  uint64_t len = 0;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t r = ::pread(fd, &len, 8, 0);
  ::close(fd);
  return r == 8 && len < (uint64_t{1} << 40) ? static_cast<size_t>(8 + len) : 0;
}
}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path, Residency residency)
    : file_(std::make_unique<MappedFile>(path, residency,
                                         residency == Residency::kMemory ? data_section_offset(path) : 0)) {
  const uint8_t* base = file_->data();
  const size_t size = file_->size();
  if (size < 8) fail(path, ": truncated safetensors file (", size, " bytes, need at least 8 for the header length)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);  // little-endian on every platform k3 targets
  if (header_len > size - 8)
    fail(path, ": header length ", header_len, " runs past the end of the file (", size, " bytes)");
  if (header_len > (uint64_t{100} << 20)) fail(path, ": header length ", header_len, " exceeds 100 MiB");
  const char* hdr = reinterpret_cast<const char*>(base + 8);
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;
  // nlohmann treats a NUL byte as the end of input, so anything after one would be silently
  // ignored (tensors included).  The format allows only trailing spaces as padding.
  if (const void* nul = std::memchr(hdr, '\0', header_len))
    fail(path, ": header contains a NUL byte at offset ", static_cast<const char*>(nul) - hdr,
         " (the header must be JSON text, padded with trailing spaces only)");

  // Parse, rejecting repeated keys (nlohmann would silently keep the last one).
  DuplicateKey duplicate;
  json header;
  try {
    header = parse_json_noting_duplicates(hdr, hdr + header_len, &duplicate);
  } catch (const json::exception& e) {
    fail(path, ": header is not valid JSON: ", e.what());
  }
  // (Tensor names contain dots themselves: the depth, not the path, tells a tensor from a field.)
  if (duplicate.depth == 1) fail(path, ": tensor '", duplicate.path, "' appears twice in the header");
  if (duplicate.depth > 1) fail(path, ": key '", duplicate.path, "' appears twice in the header");
  if (!header.is_object()) fail(path, ": header is not a JSON object");

  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(path, ": __metadata__ is ", json_preview(v), ", expected an object");
      // The format defines __metadata__ as a string-to-string map; anything else is a broken writer.
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          fail(path, ": __metadata__ value ", json_preview(m.key()), " is ", json_preview(m.value()),
               ", expected a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    // A "\u0000" escape puts a NUL in the name; it would cut every message that names the tensor.
    if (name.find('\0') != std::string::npos)
      fail(path, ": tensor name ", json_preview(name, 200), " contains a NUL byte");
    auto where = [&] { return cat(path, ": tensor '", name, "': "); };
    if (!v.is_object()) fail(where(), "entry is not an object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) fail(where(), "missing or non-string 'dtype'");
    const std::string dtype_str = v["dtype"].get<std::string>();
    auto dtype = parse_dtype(dtype_str);
    if (!dtype) fail(where(), "unknown dtype '", dtype_str, "'");
    if (!v.contains("shape") || !v["shape"].is_array()) fail(where(), "missing or non-array 'shape'");
    TensorView tv;
    tv.name = name;
    tv.dtype = *dtype;
    // Every product of the leading dims must fit an int64, as TensorView::numel() multiplies them
    // in that order: a tensor with a zero dim last has no elements, but [2^32, 2^31, 0] overflowed.
    constexpr uint64_t kMaxNumel = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : v["shape"]) {
      uint64_t dim = 0;
      if (!as_u64(d, &dim)) fail(where(), "shape entry ", json_preview(d), " is not a non-negative integer");
      if (dim > kMaxNumel) overflow = true;
      tv.shape.push_back(static_cast<int64_t>(dim));
      if (dim != 0 && numel > kMaxNumel / dim) overflow = true;
      numel *= dim;
    }
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      fail(where(), "'data_offsets' must be an array of two integers");
    uint64_t begin = 0, end = 0;
    if (!as_u64(v["data_offsets"][0], &begin) || !as_u64(v["data_offsets"][1], &end))
      fail(where(), "'data_offsets' must be non-negative integers");
    if (begin > end) fail(where(), "data_offsets [", begin, ", ", end, "] are reversed");
    if (end > data_size)
      fail(where(), "data_offsets [", begin, ", ", end, "] run past the end of the data section (", data_size,
           " bytes); the file is truncated or the header is wrong");
    const uint64_t esize = dtype_size(*dtype);
    if (overflow || numel > std::numeric_limits<uint64_t>::max() / esize)
      fail(where(), "shape ", tv.shape_str(), " is too large");
    if (numel * esize != end - begin)
      fail(where(), "shape ", tv.shape_str(), " x ", dtype_str, " needs ", numel * esize, " bytes but data_offsets span ",
           end - begin);
    tv.data = base + data_start + begin;
    tv.nbytes = static_cast<size_t>(end - begin);
    tv.file = &file_->path();
    tv.offset = data_start + begin;
    auto [slot, inserted] = tensors_.emplace(name, std::move(tv));
    (void)inserted;
    spans.push_back({begin, end, &slot->first});
  }
  // Empty tensors own no bytes and may sit anywhere (even inside another tensor's span); drop them
  // first, so they cannot hide an overlap between the tensors sorted around them.
  spans.erase(std::remove_if(spans.begin(), spans.end(), [](const Span& s) { return s.begin == s.end; }),
              spans.end());
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Sorted and non-empty, the spans overlap somewhere only if two neighbours do (up to the first
  // overlap, each span ends past the one before it).
  for (size_t i = 1; i < spans.size(); ++i) {
    const Span& a = spans[i - 1];
    const Span& b = spans[i];
    if (b.begin < a.end)
      fail(path, ": tensors '", *a.name, "' [", a.begin, ", ", a.end, ") and '", *b.name, "' [", b.begin, ", ", b.end,
           ") overlap");
  }
  // The tensors fill the data section exactly: from its first byte, without gaps, to the end of
  // the file (the reference safetensors library refuses anything else).  A shard padded with 30 GB
  // of stray bytes passed, and then made --weights auto map a file that did not need it.
  uint64_t covered = 0;
  for (const Span& s : spans) {
    if (s.begin != covered)
      fail(path, ": bytes [", covered, ", ", s.begin, ") of the data section belong to no tensor");
    covered = s.end;
  }
  if (covered != data_size)
    fail(path, ": ", data_size - covered, " bytes after the last tensor belong to no tensor (the data section is ",
         data_size, " bytes, the tensors end at ", covered, ")");
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace k3
