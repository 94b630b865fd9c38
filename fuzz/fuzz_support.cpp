#include "fuzz_support.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

#include "base/error.h"
#include "base/log.h"
#include "text/synth_tokenizer.h"
#include "text/tokenizer.h"

namespace k3::fuzz {

void property_failed(const std::string& what) {
  std::fprintf(stderr, "k3 fuzz: property failed: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

const std::string& scratch_dir() {
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    std::string templ = (base / "k3-fuzz-XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) property_failed("cannot create a scratch directory under " + base.string());
    static const std::string removed_at_exit = templ;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(removed_at_exit, ec);
    });
    return templ;
  }();
  return dir;
}

void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) property_failed("cannot write " + path);
}

std::string source_path(const std::string& relative) { return std::string(K3_SOURCE_DIR) + "/" + relative; }

const Tokenizer& synth_tokenizer() {
  static const std::unique_ptr<Tokenizer> tokenizer = [] {
    const std::string dir = scratch_dir() + "/synth-tokenizer";
    write_synth_tokenizer(dir, 1024);
    return std::make_unique<Tokenizer>(Tokenizer::from_model_dir(dir));
  }();
  return *tokenizer;
}

void quiet_logs() { set_log_level(LogLevel::kError); }

}  // namespace k3::fuzz
