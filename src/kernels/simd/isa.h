// The instruction-set levels the SIMD kernels are compiled for: the one list of levels, the GCC
// target of each, and the namespace and vector type of each level's code.
//
// A kernel family written once over a vector type (activation_isa.cpp, kda_isa.cpp, ...) is
// compiled once per level by CMake (k3_add_isa_sources in src/CMakeLists.txt, which passes
// -DK3_ISA_LEVEL=K3_ISA_<LEVEL>); a kernel for one level only defines K3_ISA_LEVEL itself before
// including isa_begin.h.  The run-time choice among them is active_isa() (base/cpu_features.h),
// made in the dispatching entry points through K3_ISA_DISPATCH (dispatch.h).
//
// Adding a level: a K3_ISA_ number and its target below, a vector type (simd/avx2.h and
// simd/avx512.h are the models) chosen in isa_begin.h, the level in K3_ISA_LEVELS
// (src/CMakeLists.txt), its Isa value (base/cpu_features.h) and a case in K3_ISA_DISPATCH.
#pragma once

// Levels with a vector type of their own (compiled per level by CMake) ...
#define K3_ISA_AVX2 1
#define K3_ISA_AVX512 2
// ... and AVX-512 with extra instructions, for the kernels that need them (single-level files,
// without a vector type: BF16 dot products in namespace avx512, AMX tiles in namespace amx).
#define K3_ISA_AVX512BF16 3
#define K3_ISA_AMX 4

// The GCC target of each level; each level's target includes the one before it.
#define K3_ISA_TARGET_AVX2 "avx2,fma,f16c"
#define K3_ISA_TARGET_AVX512 K3_ISA_TARGET_AVX2, "avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=512"
#define K3_ISA_TARGET_AVX512BF16 K3_ISA_TARGET_AVX512, "avx512bf16"
#define K3_ISA_TARGET_AMX K3_ISA_TARGET_AVX512BF16, "amx-tile,amx-bf16"

// _Pragma("GCC target(...)") for a target above (the arguments are expanded before they are
// turned into the pragma's text; GCC takes a list of target strings).
#define K3_ISA_PRAGMA_(...) _Pragma(#__VA_ARGS__)
#define K3_ISA_PRAGMA_TARGET(...) K3_ISA_PRAGMA_(GCC target(__VA_ARGS__))

// Clang (the fuzz build, fuzz/) ignores #pragma GCC target and would then refuse the level's
// intrinsics.  Its equivalent puts the target attribute on every function declared in the region
// (member functions, templates and lambdas included): one feature string per level, without
// GCC's tuning option prefer-vector-width (the attribute refuses it).
#define K3_ISA_CLANG_TARGET_AVX2 "avx2,fma,f16c"
#define K3_ISA_CLANG_TARGET_AVX512 K3_ISA_CLANG_TARGET_AVX2 ",avx512f,avx512bw,avx512vl,avx512dq"
#define K3_ISA_CLANG_TARGET_AVX512BF16 K3_ISA_CLANG_TARGET_AVX512 ",avx512bf16"
#define K3_ISA_CLANG_TARGET_AMX K3_ISA_CLANG_TARGET_AVX512BF16 ",amx-tile,amx-bf16"
#define K3_ISA_PRAGMA_CLANG_TARGET(features) \
  K3_ISA_PRAGMA_(clang attribute push(__attribute__((target(features))), apply_to = function))

// Opens the region of a level (AVX2, AVX512, AVX512BF16 or AMX) in isa_begin.h.
#if defined(__clang__)
#define K3_ISA_REGION_TARGET(LEVEL) K3_ISA_PRAGMA_CLANG_TARGET(K3_ISA_CLANG_TARGET_##LEVEL)
#else
#define K3_ISA_REGION_TARGET(LEVEL) K3_ISA_PRAGMA_TARGET(K3_ISA_TARGET_##LEVEL)
#endif
