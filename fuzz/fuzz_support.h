// Helpers shared by the fuzz targets (fuzz/*_fuzz.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/error.h"

namespace k3 {
class Tokenizer;
}

namespace k3::fuzz {

// A fuzz target's property failed: prints `what` and aborts, so libFuzzer records the input as a
// crash (exceptions other than k3::Error are left to escape, which libFuzzer reports the same way).
[[noreturn]] void property_failed(const std::string& what);
#define K3_FUZZ_ASSERT(cond, ...)                                                   \
  do {                                                                              \
    if (!(cond)) ::k3::fuzz::property_failed(::k3::cat(#cond, ": ", __VA_ARGS__)); \
  } while (0)

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A private directory for files the entry points read (under /dev/shm when it exists, so
// writing an input costs no disk I/O); made once per process, removed at exit.
const std::string& scratch_dir();
void write_file(const std::string& path, std::string_view bytes);

// A file under the source tree (e.g. "tests/data/fixtures/k3-tiny-a/config.json").
std::string source_path(const std::string& relative);

// The tokenizer of the text targets: the synthetic Kimi-style tokenizer of the built-in tiny
// model (text/synth_tokenizer.h, 1,024 ids: K3's pattern and 256 specials), written once to the
// scratch directory and loaded back the way a checkpoint's is.  Small, so masks stay fast.
const Tokenizer& synth_tokenizer();

// Silences k3's info logging (some loaders log per call).
void quiet_logs();

}  // namespace k3::fuzz
