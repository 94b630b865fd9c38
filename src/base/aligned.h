// Cache-line aligned storage for kernel scratch.  A large std::vector<float> from malloc sits
// 16 bytes off a 64-byte boundary, so every 64-byte vector load from it splits two cache lines
// (enough on its own to slow the MXFP4 expert GEMM down markedly).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace k3 {

template <typename T, std::size_t kAlign = 64>
struct AlignedAllocator {
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = AlignedAllocator<U, kAlign>;
  };
  AlignedAllocator() noexcept = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U, kAlign>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kAlign})); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{kAlign}); }
  template <typename U>
  bool operator==(const AlignedAllocator<U, kAlign>&) const noexcept {
    return true;
  }
};

// A std::vector whose data() is 64-byte aligned.
template <typename T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace k3
