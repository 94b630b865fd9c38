// A progress line on stderr for long work (loading shards, writing checkpoints, benchmarks).
// Drawn in place when stderr is a terminal; otherwise silent unless K3_PROGRESS=1 (then one line
// per ~10%), so logs stay quiet by default.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace k3 {

class Progress {
 public:
  Progress(std::string label, uint64_t total, std::string unit = "");
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(uint64_t n = 1);
  void set(uint64_t done);
  void finish();

 private:
  void draw(bool final);

  std::string label_;
  std::string unit_;
  uint64_t total_;
  uint64_t done_ = 0;
  bool enabled_;
  bool tty_;
  bool finished_ = false;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace k3
