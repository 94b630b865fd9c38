#include "io/safetensors_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace k3 {

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape, Fill fill) {
  for (const Entry& e : entries_) K3_CHECK(e.name != name, "safetensors writer: tensor '", name, "' added twice");
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) {
    K3_CHECK(d >= 0, "safetensors writer: tensor '", name, "' has a negative dimension");
    n *= static_cast<uint64_t>(d);
  }
  entries_.push_back({name, dtype, std::move(shape), n, std::move(fill)});
}

void SafetensorsWriter::add_bytes(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                  std::vector<uint8_t> bytes) {
  auto shared = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  add(name, dtype, std::move(shape), [shared, name](uint8_t* dst, size_t nbytes) {
    K3_CHECK(shared->size() == nbytes, "safetensors writer: tensor '", name, "' has ", shared->size(),
             " bytes, shape needs ", nbytes);
    if (nbytes != 0) std::memcpy(dst, shared->data(), nbytes);
  });
}

void SafetensorsWriter::add_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
  const auto* p = reinterpret_cast<const uint8_t*>(values.data());
  add_bytes(name, DType::kF32, std::move(shape), std::vector<uint8_t>(p, p + values.size() * 4));
}

void SafetensorsWriter::add_i32(const std::string& name, std::vector<int64_t> shape,
                                const std::vector<int32_t>& values) {
  const auto* p = reinterpret_cast<const uint8_t*>(values.data());
  add_bytes(name, DType::kI32, std::move(shape), std::vector<uint8_t>(p, p + values.size() * 4));
}

uint64_t SafetensorsWriter::data_bytes() const {
  uint64_t total = 0;
  for (const Entry& e : entries_) total += e.nbytes;
  return total;
}

std::vector<std::string> SafetensorsWriter::names() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.push_back(e.name);
  return out;
}

void SafetensorsWriter::write(const std::string& path, const std::function<void(uint64_t)>& on_tensor) const {
  std::vector<const Entry*> order;
  for (const Entry& e : entries_) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(),
                   [](const Entry* a, const Entry* b) { return dtype_size(a->dtype) > dtype_size(b->dtype); });

  nlohmann::json header = nlohmann::json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const Entry* e : order) {
    header[e->name] = {{"dtype", dtype_name(e->dtype)}, {"shape", e->shape}, {"data_offsets", {offset, offset + e->nbytes}}};
    offset += e->nbytes;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');

  const std::string tmp = path + ".tmp";
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
  if (!f) fail(tmp, ": cannot create: ", std::strerror(errno));
  auto put = [&](const void* p, size_t n) {
    if (n != 0 && std::fwrite(p, 1, n, f.get()) != n) fail(tmp, ": write failed: ", std::strerror(errno));
  };
  const uint64_t len = text.size();
  put(&len, 8);
  put(text.data(), text.size());
  std::vector<uint8_t> buf;
  for (const Entry* e : order) {
    buf.assign(e->nbytes, 0);
    if (e->fill) e->fill(buf.data(), buf.size());
    put(buf.data(), buf.size());
    if (on_tensor) on_tensor(e->nbytes);
  }
  buf.clear();
  buf.shrink_to_fit();
  if (std::fflush(f.get()) != 0) fail(tmp, ": write failed: ", std::strerror(errno));
  f.reset();
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(path, ": cannot rename from ", tmp, ": ", std::strerror(errno));
}

}  // namespace k3
