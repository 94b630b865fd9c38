// The block walk the AVX-512 whole-row GEMMs share (linear_gemm_avx512.cpp: fp32 math;
// linear_bf16dot_avx512.cpp: bf16 dot products): blocks of kTok tokens x kRows rows; in each,
// token tiles of kT tokens and then one tile of the tokens left over, every tile against all
// the block's rows.  A block's rows stay in L2 while its token tiles pass.  Include after the
// ISA pragma (the callbacks are compiled for it), and the headers it includes before it (so no
// standard-library template is compiled for AVX-512 here and picked by the linker elsewhere).
#pragma once

#include <algorithm>
#include <cstdint>

namespace k3::avx512 {

// run.template operator()<T>(tb, rb, rn, t): tokens tb + t .. tb + t + T - 1 against rows
// [rb, rb + rn); T is kT, or 1 .. kT - 1 for the block's last tile.
template <int64_t kTok, int64_t kRows, int kT, class Run>
void for_each_gemm_tile(int64_t n, int64_t r0, int64_t r1, Run&& run) {
  static_assert(kT >= 1 && kT <= 6, "remainder tiles are dispatched up to 5 tokens");
  for (int64_t tb = 0; tb < n; tb += kTok) {
    const int64_t tn = std::min(kTok, n - tb);
    for (int64_t rb = r0; rb < r1; rb += kRows) {
      const int64_t rn = std::min(kRows, r1 - rb);
      int64_t t = 0;
      for (; t + kT <= tn; t += kT) run.template operator()<kT>(tb, rb, rn, t);
      switch (tn - t) {
        case 5: if constexpr (kT > 5) run.template operator()<5>(tb, rb, rn, t); break;
        case 4: if constexpr (kT > 4) run.template operator()<4>(tb, rb, rn, t); break;
        case 3: if constexpr (kT > 3) run.template operator()<3>(tb, rb, rn, t); break;
        case 2: if constexpr (kT > 2) run.template operator()<2>(tb, rb, rn, t); break;
        case 1: if constexpr (kT > 1) run.template operator()<1>(tb, rb, rn, t); break;
        default: break;
      }
    }
  }
}

}  // namespace k3::avx512
