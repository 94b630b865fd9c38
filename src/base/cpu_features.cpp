#include "base/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "base/error.h"
#include "base/log.h"

namespace k3 {
namespace {

uint64_t read_xcr0() {
  uint32_t eax = 0;
  uint32_t edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) == 0) return f;
  const unsigned max_leaf = a;
  __get_cpuid(1, &a, &b, &c, &d);
  const bool osxsave = (c & (1u << 27)) != 0;
  const bool fma = (c & (1u << 12)) != 0;
  const bool f16c = (c & (1u << 29)) != 0;
  if (!osxsave) return f;
  const uint64_t xcr0 = read_xcr0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;
  if (max_leaf < 7 || !os_avx) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = (b & (1u << 5)) != 0;
  f.fma = fma;
  f.f16c = f16c;
  if (os_avx512) {
    f.avx512f = (b & (1u << 16)) != 0;
    f.avx512dq = (b & (1u << 17)) != 0;
    f.avx512bw = (b & (1u << 30)) != 0;
    f.avx512vl = (b & (1u << 31)) != 0;
    f.avx512_vnni = (c & (1u << 11)) != 0;
  }
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  __cpuid_count(7, 1, a1, b1, c1, d1);
  f.avx_vnni = (a1 & (1u << 4)) != 0;
  if (os_avx512) f.avx512_bf16 = (a1 & (1u << 5)) != 0;
  // AMX: CPUID.7.0:EDX bit 24 (tiles) and 22 (bf16), XCR0 bits 17-18 (tile config and data),
  // and Linux's per-process permission for the 8 KiB of tile data (XFEATURE_XTILEDATA = 18).
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;
  if (os_avx512 && os_amx && (d & (1u << 24)) != 0 && (d & (1u << 22)) != 0) {
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0) f.amx_tile = f.amx_bf16 = true;
  }
  return f;
}

// want, or the best the CPU (and OS) offer when want is beyond them, saying so after `asked`.
Isa runnable_isa(Isa want, Isa best, const std::string& asked) {
  if (want <= best) return want;
  log_warn(asked, "this CPU cannot run ", isa_name(want), "; using ", isa_name(best));
  return best;
}

Isa isa_from_env(Isa best) {
  const char* v = std::getenv("K3_ISA");
  if (v == nullptr || *v == '\0') return best;
  return runnable_isa(parse_isa(v), best, cat("K3_ISA=", v, ": "));
}

std::atomic<int>& active_slot() {
  static std::atomic<int> slot{static_cast<int>(isa_from_env(best_isa()))};
  return slot;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

Isa best_isa() {
  const CpuFeatures& f = cpu_features();
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma)
    return f.amx_tile && f.amx_bf16 && f.avx512_bf16 ? Isa::kAmx : Isa::kAvx512;
  if (f.avx2 && f.fma && f.f16c) return Isa::kAvx2;
  return Isa::kRef;
}

Isa active_isa() { return static_cast<Isa>(active_slot().load(std::memory_order_relaxed)); }

Isa force_isa(Isa isa) {
  Isa best = best_isa();
  Isa eff = isa > best ? best : isa;
  active_slot().store(static_cast<int>(eff));
  return eff;
}

Isa request_isa(Isa want) {
  const Isa eff = runnable_isa(want, best_isa(), "");
  active_slot().store(static_cast<int>(eff));
  return eff;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kRef: return "ref";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAmx: return "amx";
  }
  return "?";
}

Isa parse_isa(const std::string& name) {
  if (name == "ref") return Isa::kRef;
  if (name == "avx2") return Isa::kAvx2;
  if (name == "avx512") return Isa::kAvx512;
  if (name == "amx") return Isa::kAmx;
  fail("unknown instruction set '", name, "' (expected ref, avx2, avx512 or amx)");
}

std::string cpu_features_summary() {
  const CpuFeatures& f = cpu_features();
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.avx_vnni, "avx_vnni");
  add(f.amx_tile, "amx_tile");
  add(f.amx_bf16, "amx_bf16");
  return s.empty() ? std::string("(none)") : s;
}

}  // namespace k3
