// What the CPU can do, read once at start-up, and the instruction-set level the kernels use.
// The level can be forced lower (never higher than the CPU supports) with K3_ISA=ref|avx2|avx512|amx
// or force_isa(), which is how the tests run every fixture on each dispatch path.
//
// kAmx is kAvx512 plus the AMX-BF16 tile unit (Sapphire Rapids and later), usable only once the
// kernel has granted this process the tile state (arch_prctl ARCH_REQ_XCOMP_PERM, requested at
// detection).  At that level products with bf16 weights run on tiles; everything else runs the
// AVX-512 kernels.
#pragma once

#include <string>

namespace k3 {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
  bool avx_vnni = false;
  bool amx_tile = false;  // CPU and OS support, and the process was granted the tile state
  bool amx_bf16 = false;
};

enum class Isa { kRef = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

const CpuFeatures& cpu_features();

// Highest level the hardware supports.
Isa best_isa();
// Level the kernels currently dispatch to.
Isa active_isa();
// Forces the dispatch level; requests above best_isa() are clamped.  Returns the level in effect.
Isa force_isa(Isa isa);
// force_isa for a user's --isa: also warns when the CPU cannot run `want`.
Isa request_isa(Isa want);
const char* isa_name(Isa isa);
// Parses "ref", "avx2", "avx512", "amx"; throws k3::Error otherwise.
Isa parse_isa(const std::string& name);

std::string cpu_features_summary();

}  // namespace k3
