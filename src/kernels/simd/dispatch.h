// K3_ISA_DISPATCH(isa, call): runs `call` (a function call expression, without namespace) from
// the namespace of the level `isa` selects and returns its result:
//   avx512::call for Isa::kAvx512 and Isa::kAmx, avx2::call for Isa::kAvx2, portable::call for Isa::kRef.
// The one mapping from run-time levels (base/cpu_features.h) to the per-level namespaces
// (simd/isa.h) for every kernel family compiled per level; used in the function that dispatches.
#pragma once

#include "base/cpu_features.h"

#define K3_ISA_DISPATCH(isa, call)            \
  do {                                        \
    switch (isa) {                            \
      case ::k3::Isa::kAmx:                   \
      case ::k3::Isa::kAvx512:                \
        return avx512::call;                  \
      case ::k3::Isa::kAvx2:                  \
        return avx2::call;                    \
      case ::k3::Isa::kRef:                   \
        break;                                \
    }                                         \
    return portable::call;                    \
  } while (0)
