// Quiet-by-default logging to stderr.  Level comes from set_log_level() (the CLI's -v/-q) or the
// K3_LOG environment variable (error|warn|info|debug).
#pragma once

#include <string>

#include "base/error.h"

namespace k3 {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_line(LogLevel level, const std::string& message);

template <typename... Args>
void log_info(Args&&... args) {
  if (log_level() >= LogLevel::kInfo) log_line(LogLevel::kInfo, cat(std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(Args&&... args) {
  if (log_level() >= LogLevel::kWarn) log_line(LogLevel::kWarn, cat(std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(Args&&... args) {
  if (log_level() >= LogLevel::kDebug) log_line(LogLevel::kDebug, cat(std::forward<Args>(args)...));
}

}  // namespace k3
