#include "server/peer_connection.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace k3::server {
namespace {

// An endpoint as the kernel writes it in /proc/net/tcp and tcp6: the address's 32-bit words, each
// as it lies in memory read as a host-order integer, in %08X, then ':' and the port in %04X.
// IPv4 when the address has no ':' (tcp), else IPv6, IPv4-mapped ones included (tcp6).
std::optional<std::string> proc_net_endpoint(const std::string& addr, int port, bool* v6) {
  unsigned char bytes[16];
  *v6 = addr.find(':') != std::string::npos;
  if (inet_pton(*v6 ? AF_INET6 : AF_INET, addr.c_str(), bytes) != 1) return std::nullopt;
  std::string out;
  char word[16];
  for (int i = 0; i < (*v6 ? 4 : 1); ++i) {
    uint32_t w;
    std::memcpy(&w, bytes + 4 * i, 4);
    std::snprintf(word, sizeof word, "%08X", w);
    out += word;
  }
  std::snprintf(word, sizeof word, ":%04X", port);
  return out + word;
}

// The inode of the socket whose local and remote endpoints are these, from /proc/self/net/tcp[6].
std::optional<unsigned long> socket_inode(const char* table, const std::string& local, const std::string& remote) {
  FILE* f = std::fopen(table, "re");
  if (!f) return std::nullopt;
  std::optional<unsigned long> inode;
  char line[512];
  bool header = true;
  while (std::fgets(line, sizeof line, f)) {
    if (header) {  // "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"
      header = false;
      continue;
    }
    char loc[64], rem[64];
    unsigned long ino = 0;
    if (std::sscanf(line, "%*s %63s %63s %*s %*s %*s %*s %*s %*s %lu", loc, rem, &ino) == 3 && local == loc &&
        remote == rem && ino != 0) {
      inode = ino;
      break;
    }
  }
  std::fclose(f);
  return inode;
}

}  // namespace

// The connection is looked up by name, never by probing descriptors: the kernel's TCP table gives
// the socket's inode, and readlink on /proc/self/fd/N ("socket:[INODE]") the descriptor.  Calls on
// the other descriptors (fstat, getpeername) would race with the threads that own and close them.
std::optional<PeerConnection> PeerConnection::find(const std::string& local_addr, int local_port,
                                                   const std::string& remote_addr, int remote_port) {
  if (remote_port <= 0 || remote_port > 65535 || local_port <= 0 || local_port > 65535) return std::nullopt;
  bool local_v6 = false, remote_v6 = false;
  const std::optional<std::string> local = proc_net_endpoint(local_addr, local_port, &local_v6);
  const std::optional<std::string> remote = proc_net_endpoint(remote_addr, remote_port, &remote_v6);
  if (!local || !remote || local_v6 != remote_v6) return std::nullopt;
  const std::optional<unsigned long> inode =
      socket_inode(local_v6 ? "/proc/self/net/tcp6" : "/proc/self/net/tcp", *local, *remote);
  if (!inode) return std::nullopt;
  const std::string want = "socket:[" + std::to_string(*inode) + "]";
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return std::nullopt;
  std::optional<PeerConnection> found;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    char path[64], link[64];
    std::snprintf(path, sizeof path, "/proc/self/fd/%ld", fd);
    const ssize_t n = readlink(path, link, sizeof link);
    if (n > 0 && static_cast<size_t>(n) == want.size() && want.compare(0, want.size(), link, n) == 0) {
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
