#include "io/numa.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/log.h"

namespace k3 {

std::vector<int> parse_node_list(const std::string& text) {
  std::vector<int> nodes;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    while (!part.empty() && (part.back() == '\n' || part.back() == ' ')) part.pop_back();
    if (part.empty()) continue;
    char* end = nullptr;
    const long a = std::strtol(part.c_str(), &end, 10);
    long b = a;
    if (*end == '-') b = std::strtol(end + 1, &end, 10);
    if (*end != '\0' || a < 0 || b < a || b > 4095) return {};
    for (long n = a; n <= b; ++n) nodes.push_back(static_cast<int>(n));
  }
  return nodes;
}

const std::vector<int>& memory_nodes() {
  static const std::vector<int> nodes = [] {
    for (const char* f : {"/sys/devices/system/node/has_memory", "/sys/devices/system/node/online"}) {
      std::ifstream in(f);
      std::string text;
      if (std::getline(in, text)) {
        std::vector<int> n = parse_node_list(text);
        if (!n.empty()) return n;
      }
    }
    return std::vector<int>{0};
  }();
  return nodes;
}

bool interleave_over_nodes(void* p, size_t bytes) {
  const std::vector<int>& nodes = memory_nodes();
  if (nodes.size() < 2 || p == nullptr || bytes == 0) return false;
  constexpr int kMpolInterleave = 3;  // MPOL_INTERLEAVE (linux/mempolicy.h)
  std::vector<unsigned long> mask(64, 0);  // 4096 nodes
  constexpr int kBits = 8 * sizeof(unsigned long);
  for (int n : nodes) mask[static_cast<size_t>(n / kBits)] |= 1UL << (n % kBits);
  const long rc = ::syscall(SYS_mbind, p, bytes, kMpolInterleave, mask.data(), mask.size() * kBits, 0);
  if (rc != 0) {
    log_info("mbind(MPOL_INTERLEAVE) over ", nodes.size(), " NUMA nodes refused (errno ", errno, "); pages stay local");
    return false;
  }
  return true;
}

}  // namespace k3
