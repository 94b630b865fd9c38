// Spreading weight memory over NUMA nodes.  Decode reads every weight once per token with every
// core busy: on a machine with several memory nodes, weights placed on one node (first touch by
// the reading thread) are read through one node's memory channels and the socket link, while
// pages interleaved over the nodes that have memory are read at the sum of their bandwidths.
// On a single-node machine (and where mbind is refused) nothing changes.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace k3 {

// The node numbers in a sysfs node list such as "0-3,6" ({} for text it cannot read).
std::vector<int> parse_node_list(const std::string& text);

// The nodes with memory (/sys/devices/system/node/has_memory, else online); {0} if unknown.
const std::vector<int>& memory_nodes();

// Interleaves the pages of [p, p + bytes) over memory_nodes() before they are first touched.
// Returns false (and changes nothing) on a single-node machine or when the kernel refuses.
bool interleave_over_nodes(void* p, size_t bytes);

}  // namespace k3
