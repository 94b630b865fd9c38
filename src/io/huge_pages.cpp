#include "io/huge_pages.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

#include "io/checkpoint.h"

namespace k3 {
namespace {

struct Vma {
  uintptr_t start = 0, end = 0;
  uint64_t huge = 0;  // bytes
};

// A line that starts a mapping's entry: its first word has a '-' and no ':' (field lines are
// "Name:   value").
bool looks_like_header(const std::string& line) {
  const std::string word = line.substr(0, line.find(' '));
  return word.find('-') != std::string::npos && word.find(':') == std::string::npos;
}

// A header line "7f12a4000000-7f12a4200000 r--p ..." -> the range; false when it is not two hex
// addresses, the second above the first.
bool parse_header(const std::string& line, uintptr_t* start, uintptr_t* end) {
  const size_t dash = line.find('-');
  const size_t space = line.find(' ');
  if (space == std::string::npos || dash == 0) return false;
  for (size_t i = 0; i < space; ++i)
    if (i != dash && !std::isxdigit(static_cast<unsigned char>(line[i]))) return false;
  *start = std::strtoull(line.substr(0, dash).c_str(), nullptr, 16);
  *end = std::strtoull(line.substr(dash + 1, space - dash - 1).c_str(), nullptr, 16);
  return *end > *start;
}

// "AnonHugePages:   2048 kB" -> bytes, for the three (disjoint) fields that count PMD-mapped memory.
uint64_t huge_field_bytes(const std::string& line) {
  for (const char* field : {"AnonHugePages:", "FilePmdMapped:", "ShmemPmdMapped:"}) {
    const std::string f = field;
    if (line.compare(0, f.size(), f) == 0) return std::strtoull(line.c_str() + f.size(), nullptr, 10) * 1024;
  }
  return 0;
}

}  // namespace

HugePageCoverage huge_page_coverage(const std::string& smaps_text,
                                    const std::vector<std::pair<uintptr_t, uintptr_t>>& ranges) {
  std::vector<Vma> vmas;
  std::istringstream in(smaps_text);
  std::string line;
  bool in_vma = false;  // the fields below belong to the last parsed mapping
  while (std::getline(in, line)) {
    uintptr_t s = 0, e = 0;
    if (looks_like_header(line)) {
      in_vma = parse_header(line, &s, &e);  // an entry that cannot be read: its fields count for nothing
      if (in_vma) vmas.push_back({s, e, 0});
    } else if (in_vma) {
      vmas.back().huge += huge_field_bytes(line);
    }
  }
  HugePageCoverage c;
  for (const auto& [lo, hi] : ranges) {
    if (hi <= lo) continue;
    c.bytes += hi - lo;
    for (const Vma& v : vmas) {
      const uintptr_t a = std::max(lo, v.start), b = std::min(hi, v.end);
      if (a >= b) continue;
      c.mapped += b - a;
      if (v.huge == 0) continue;
      const double share = static_cast<double>(b - a) / static_cast<double>(v.end - v.start);
      c.huge += std::min<uint64_t>(b - a, static_cast<uint64_t>(share * static_cast<double>(v.huge) + 0.5));
    }
  }
  return c;
}

HugePageCoverage huge_page_coverage(const std::vector<std::pair<uintptr_t, uintptr_t>>& ranges) {
  std::string text;
  try {
    text = read_text_file("/proc/self/smaps");
  } catch (const std::exception&) {
    // No mappings: only `bytes` is counted, and known() says so.
  }
  return huge_page_coverage(text, ranges);
}

}  // namespace k3
