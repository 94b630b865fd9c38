// Element types of safetensors files, with their names and sizes as the format spells them.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace k3 {

enum class DType { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool, kF8E4M3 };

// Bytes per element.
size_t dtype_size(DType t);
// The safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
const char* dtype_name(DType t);
std::optional<DType> parse_dtype(const std::string& name);

}  // namespace k3
