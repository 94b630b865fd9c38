#include "server/peer_connection.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace k3::server {
namespace {

// (numeric host, port) of a socket address, as cpp-httplib derives Request::remote_addr.
bool host_port(const sockaddr_storage& a, socklen_t len, std::string* host, int* port) {
  char h[NI_MAXHOST], p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof h, p, sizeof p, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  *host = h;
  *port = std::atoi(p);
  return true;
}

bool endpoint_is(int fd, bool peer, const std::string& host, int port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if ((peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len)) != 0)
    return false;
  std::string h;
  int p = -1;
  return host_port(a, len, &h, &p) && p == port && h == host;
}

}  // namespace

std::optional<PeerConnection> PeerConnection::find(const std::string& local_addr, int local_port,
                                                   const std::string& remote_addr, int remote_port) {
  if (remote_port <= 0 || local_port <= 0) return std::nullopt;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return std::nullopt;
  std::optional<PeerConnection> found;
  const int self = dirfd(dir);
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == self) continue;
    struct stat st{};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (endpoint_is(static_cast<int>(fd), true, remote_addr, remote_port) &&
        endpoint_is(static_cast<int>(fd), false, local_addr, local_port)) {
      found = PeerConnection(static_cast<int>(fd));
      break;
    }
  }
  closedir(dir);
  return found;
}

bool PeerConnection::hung_up() const {
  pollfd p{fd_, static_cast<short>(POLLIN | POLLRDHUP), 0};
  const int n = poll(&p, 1, 0);
  if (n < 0) return errno != EINTR;
  if (n == 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {  // bytes (a pipelined request) mean alive; a 0-byte peek means EOF
    char c;
    const ssize_t r = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return false;
}

}  // namespace k3::server
