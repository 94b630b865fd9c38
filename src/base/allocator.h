// Process-wide malloc settings for inference: the model's per-step buffers (a 512-token prefill
// chunk allocates tens of MB per layer: expert inputs, gate / up products, attention scratch)
// are freed and allocated again every step.  With glibc's defaults, blocks past the mmap
// threshold come from fresh mappings and the heap is trimmed past 128 KB free, so every step
// page-faults and zeroes that memory again.  tune_allocator() keeps blocks below 64 MB on the
// heap and trims it only past 256 MB free, so a step reuses the pages the previous one freed
// (this speeds up prefill; decode, with its small buffers, is unaffected).
// Called by the k3 command line before any work; a no-op off glibc, or when GLIBC_TUNABLES
// already sets malloc parameters (the user's choice wins).
#pragma once

namespace k3 {

void tune_allocator();

}  // namespace k3
