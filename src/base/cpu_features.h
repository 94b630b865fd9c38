// What the CPU can do, read once at start-up, and the instruction-set level the kernels use.
// The level can be forced lower (never higher than the CPU supports) with K3_ISA=ref|avx2|avx512
// or force_isa(), which is how the tests run every fixture on each dispatch path.
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
};

enum class Isa { kRef = 0, kAvx2 = 1, kAvx512 = 2 };

const CpuFeatures& cpu_features();

// Highest level the hardware supports.
Isa best_isa();
// Level the kernels currently dispatch to.
Isa active_isa();
// Forces the dispatch level; requests above best_isa() are clamped.  Returns the level in effect.
Isa force_isa(Isa isa);
const char* isa_name(Isa isa);
// Parses "ref", "avx2", "avx512"; throws k3::Error otherwise.
Isa parse_isa(const std::string& name);

std::string cpu_features_summary();

}  // namespace k3
