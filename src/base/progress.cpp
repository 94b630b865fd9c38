#include "base/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace k3 {

Progress::Progress(std::string label, uint64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total) {
  tty_ = isatty(STDERR_FILENO) != 0;
  const char* env = std::getenv("K3_PROGRESS");
  const bool forced_on = env != nullptr && std::strcmp(env, "1") == 0;
  const bool forced_off = env != nullptr && std::strcmp(env, "0") == 0;
  enabled_ = !forced_off && (tty_ || forced_on);
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

Progress::~Progress() { finish(); }

void Progress::advance(uint64_t n) { set(done_ + n); }

void Progress::set(uint64_t done) {
  done_ = done > total_ ? total_ : done;
  if (!enabled_) return;
  draw(false);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (enabled_) draw(true);
}

void Progress::draw(bool final) {
  const auto now = std::chrono::steady_clock::now();
  const double pct = total_ == 0 ? 100.0 : 100.0 * static_cast<double>(done_) / static_cast<double>(total_);
  if (tty_) {
    if (!final && now - last_draw_ < std::chrono::milliseconds(100) && done_ != total_) return;
    last_draw_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "\r%s: %llu/%llu%s%s (%.0f%%, %.1fs)%s", label_.c_str(),
                 static_cast<unsigned long long>(done_), static_cast<unsigned long long>(total_),
                 unit_.empty() ? "" : " ", unit_.c_str(), pct, secs, final ? "\n" : "");
  } else {
    const int decile = static_cast<int>(pct / 10.0);
    if (decile == last_decile_ && !final) return;
    if (final && decile == last_decile_) return;
    last_decile_ = decile;
    std::fprintf(stderr, "%s: %.0f%%\n", label_.c_str(), pct);
  }
  std::fflush(stderr);
}

}  // namespace k3
