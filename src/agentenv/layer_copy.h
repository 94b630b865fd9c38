// Copies a sandbox's writable overlay layer for a fork: every entry with its mode, times,
// extended attributes (overlayfs keeps opaque folders and redirects in trusted.overlay.*),
// whiteouts (0/0 character devices: files deleted from the base) and symlinks as they are, and
// ownership moved from the parent's uid range to the child's.
#pragma once

#include <cstdint>
#include <string>

namespace k3::agentenv {

struct LayerCopyStats {
  uint64_t files = 0, dirs = 0, bytes = 0;
};

// Copies the contents of `from` into the existing empty folder `to`; ids in
// [from_base, from_base + 65536) become the same offset from to_base, others are kept.
// Throws k3::Error naming the entry that failed.
LayerCopyStats copy_layer(const std::string& from, const std::string& to, uint32_t from_base,
                          uint32_t to_base);

}  // namespace k3::agentenv
