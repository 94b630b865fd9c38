// The TCP connection behind an HTTP request, found so that a handler which blocks for a long
// time (a non-streaming generation) can notice the client hanging up and stop working for
// nobody.  cpp-httplib 0.11 hands a handler neither its socket nor a closed-connection signal,
// but it does give both endpoints of the connection (Request::local_addr / local_port /
// remote_addr / remote_port), and those name exactly one open TCP socket: find() looks its inode
// up in /proc/self/net/tcp (or tcp6) and then the descriptor among /proc/self/fd.  Linux only;
// elsewhere, or when no socket matches, find() returns nothing and the caller simply cannot tell.
//
// The socket stays owned by cpp-httplib and open until the handler returns, so the descriptor
// is valid for the handler's lifetime; hung_up() only peeks and never reads request bytes.
#pragma once

#include <optional>
#include <string>

namespace k3::server {

class PeerConnection {
 public:
  // Addresses as cpp-httplib writes them (numeric, from getnameinfo).
  static std::optional<PeerConnection> find(const std::string& local_addr, int local_port,
                                            const std::string& remote_addr, int remote_port);

  // True once the peer closed its side or the connection failed (FIN, RST, an error).  A client
  // that half-closes (shutdown(SHUT_WR) after its request, as `nc -N` does) cannot be told from
  // one that hung up before any reply byte is sent, so it counts as gone, its request is
  // cancelled (status 499) and it gets no reply: nginx's default (proxy_ignore_client_abort off)
  // makes the same choice.  Cancelling abandoned generations is worth more than those clients.
  bool hung_up() const;
  int fd() const { return fd_; }

 private:
  explicit PeerConnection(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace k3::server
