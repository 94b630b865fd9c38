// k3's single error style: anything that can fail on user input (files, configs, requests)
// throws k3::Error with a message that names the offending file / tensor / field.  The CLI and
// the server catch it at their boundary and turn it into an exit code or an HTTP envelope.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace k3 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Concatenates any streamable values into one string: cat("tensor ", name, " has ", n, " rows").
template <typename... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(cat(std::forward<Args>(args)...));
}

}  // namespace k3

// Input validation that must hold in release builds too (not an assert).
#define K3_CHECK(cond, ...)                         \
  do {                                              \
    if (!(cond)) ::k3::fail(__VA_ARGS__);           \
  } while (0)
