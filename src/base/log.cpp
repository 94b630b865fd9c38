#include "base/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace k3 {
namespace {

LogLevel level_from_env() {
  const char* v = std::getenv("K3_LOG");
  if (v == nullptr) return LogLevel::kWarn;
  if (std::strcmp(v, "error") == 0) return LogLevel::kError;
  if (std::strcmp(v, "info") == 0) return LogLevel::kInfo;
  if (std::strcmp(v, "debug") == 0) return LogLevel::kDebug;
  // A misspelt level ("verbose", "INFO") means warn, and says so rather than falling back silently.
  if (*v != '\0' && std::strcmp(v, "warn") != 0 && std::strcmp(v, "warning") != 0)
    log_line(LogLevel::kWarn, cat("K3_LOG='", v, "' is not error, warn, info or debug; using warn"));
  return LogLevel::kWarn;
}

std::atomic<int>& level_slot() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

}  // namespace

void set_log_level(LogLevel level) { level_slot().store(static_cast<int>(level)); }
LogLevel log_level() { return static_cast<LogLevel>(level_slot().load()); }

void log_line(LogLevel level, const std::string& message) {
  static std::mutex mu;
  static const char* names[] = {"error", "warn", "info", "debug"};
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "k3 %s: %s\n", names[static_cast<int>(level)], message.c_str());
}

}  // namespace k3
