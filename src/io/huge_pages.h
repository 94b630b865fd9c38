// How much of a set of address ranges the kernel backs with 2 MiB (PMD) pages, read from the
// text of /proc/self/smaps.  Decode streams its weights once per token, and on 4 KiB pages that
// stream is much slower than on huge pages, so `k3 bench` and the load log say how the weights
// are backed.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace k3 {

struct HugePageCoverage {
  uint64_t bytes = 0;   // the ranges' size
  uint64_t mapped = 0;  // of which inside a mapping smaps lists (0: smaps unreadable, or no match)
  uint64_t huge = 0;    // of which in huge pages (AnonHugePages + FilePmdMapped + ShmemPmdMapped), apportioned
  bool known() const { return mapped > 0; }
  double fraction() const { return bytes > 0 ? static_cast<double>(huge) / static_cast<double>(bytes) : 0.0; }
};

// Coverage of the half-open address ranges [first, second) given the text of an smaps file.  A
// mapping (VMA) reports its huge bytes as one total, so a range covering part of a mapping gets
// that part's proportional share.  Overlapping ranges are counted once per range.
HugePageCoverage huge_page_coverage(const std::string& smaps_text,
                                    const std::vector<std::pair<uintptr_t, uintptr_t>>& ranges);

// The same for this process, from /proc/self/smaps; where it cannot be read, only `bytes` is set
// (known() is false).
HugePageCoverage huge_page_coverage(const std::vector<std::pair<uintptr_t, uintptr_t>>& ranges);

}  // namespace k3
