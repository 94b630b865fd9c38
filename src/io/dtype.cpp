#include "io/dtype.h"

namespace k3 {
namespace {

struct Entry {
  DType type;
  const char* name;
  size_t size;
};

constexpr Entry kTable[] = {
    {DType::kF32, "F32", 4},   {DType::kF16, "F16", 2},  {DType::kBF16, "BF16", 2},
    {DType::kF64, "F64", 8},   {DType::kI64, "I64", 8},  {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},   {DType::kI8, "I8", 1},    {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1}, {DType::kF8E4M3, "F8_E4M3", 1},
};

}  // namespace

size_t dtype_size(DType t) {
  for (const Entry& e : kTable)
    if (e.type == t) return e.size;
  return 0;
}

const char* dtype_name(DType t) {
  for (const Entry& e : kTable)
    if (e.type == t) return e.name;
  return "?";
}

std::optional<DType> parse_dtype(const std::string& name) {
  for (const Entry& e : kTable)
    if (name == e.name) return e.type;
  return std::nullopt;
}

}  // namespace k3
