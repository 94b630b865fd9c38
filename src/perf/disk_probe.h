// Sequential read bandwidth of files through the weight store's own reader (io/extent_reader.h:
// a few threads of pread(2) in 8 MiB chunks with O_DIRECT, or through the page cache with its
// pages dropped where O_DIRECT is refused), in batches of 256 MiB.  k3 plan takes the disk
// figure of its prediction from here.
//
// A file hole (a sparse checkpoint such as `k3 synth --sparse` writes) reads as zeros without
// touching the device, at memory speed: the probe measures which fraction of what it read was
// holes (lseek SEEK_DATA / SEEK_HOLE), and a caller should not take the bandwidth of holes for
// the disk's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace k3 {

struct DiskProbeResult {
  uint64_t bytes = 0;        // read
  double seconds = 0;
  double gbps = 0;           // bytes / seconds / 1e9
  double hole_fraction = 0;  // of the ranges read, the share that lies in file holes
  bool direct = true;        // every file read with O_DIRECT
  int files = 0;             // files read from
  bool stopped_early = false;  // max_seconds ran out before max_bytes were read
};

struct DiskProbeOptions {
  uint64_t max_bytes = uint64_t{4} << 30;  // read at most this much, spread evenly over the files
  int threads = 4;
  double max_seconds = 20;  // stop taking chunks after this long
};

// Reads the first bytes of each file (an even share of max_bytes each, more from the larger
// files when some are smaller than their share).  Throws k3::Error naming a file that cannot be
// opened or read, or when there is nothing to read.
DiskProbeResult probe_disk(const std::vector<std::string>& files, const DiskProbeOptions& options = {});

}  // namespace k3
