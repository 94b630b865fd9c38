// Opens the region of a source file compiled for the level K3_ISA_LEVEL (isa.h): every function
// defined between this header and isa_end.h is compiled for that instruction set, inside
// namespace k3::K3_ISA_NS, with k3::K3_ISA_NS::Vec the level's vector type (levels with one).
//
// Include it after every other header of the file (the standard library included): a header
// first included inside the region would compile its inline functions for this level, and the
// linker may keep that copy for the whole program, running it on CPUs without the instructions.
// (For the same reason the levels come from this pragma, never from -m flags, and these files
// stay out of unity builds.)  Headers that are meant to be compiled per level (the *_tiles.h
// templates over a vector type) are included after this one.  No include guard: one region per file.
#ifndef K3_ISA_LEVEL
#error "define K3_ISA_LEVEL (kernels/simd/isa.h) before including kernels/simd/isa_begin.h"
#endif

// What the vector types use, at the baseline target.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "base/numeric_types.h"
#include "kernels/simd/isa.h"

#if !defined(__clang__)  // (clang: isa.h's K3_ISA_REGION_TARGET pushes an attribute region instead)
#pragma GCC push_options
// GCC 12 warns about deliberately undefined lanes inside its own AVX-512 intrinsic headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#if K3_ISA_LEVEL == K3_ISA_AVX2
K3_ISA_REGION_TARGET(AVX2)
#define K3_ISA_NS avx2
#include "kernels/simd/avx2.h"
namespace k3::avx2 {
using Vec = simd::Avx2;
}
#elif K3_ISA_LEVEL == K3_ISA_AVX512
K3_ISA_REGION_TARGET(AVX512)
#define K3_ISA_NS avx512
#include "kernels/simd/avx512.h"
namespace k3::avx512 {
using Vec = simd::Avx512;
}
// The AVX-512 extensions: kernels written for them alone, with no vector type (a vector type's
// inline functions compiled under more than one target would leave the linker a choice).
#elif K3_ISA_LEVEL == K3_ISA_AVX512BF16
K3_ISA_REGION_TARGET(AVX512BF16)
#define K3_ISA_NS avx512
#elif K3_ISA_LEVEL == K3_ISA_AMX
K3_ISA_REGION_TARGET(AMX)
#define K3_ISA_NS amx
#else
#error "unknown K3_ISA_LEVEL"
#endif
