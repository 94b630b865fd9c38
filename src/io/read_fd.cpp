#include "io/read_fd.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace k3 {

std::string read_fd(int fd, const std::string& what, uint64_t max_bytes, uint64_t size_hint) {
  const uint64_t cap = max_bytes == UINT64_MAX ? max_bytes : max_bytes + 1;
  std::string data(static_cast<size_t>(std::min<uint64_t>(cap, std::max<uint64_t>(size_hint + 1, 1 << 16))), '\0');
  size_t have = 0;
  for (;;) {
    if (have == data.size()) {
      if (data.size() >= cap) break;
      data.resize(static_cast<size_t>(std::min<uint64_t>(cap, uint64_t{data.size()} * 2)));
    }
    const ssize_t n = ::read(fd, data.data() + have, data.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(what, ": ", std::strerror(errno));
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  data.resize(have);
  return data;
}

}  // namespace k3
