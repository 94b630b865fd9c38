// cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed when Debian built
// it): a burst of connections -- tens of clients at once -- overflows that while the accept thread
// starts workers, and the kernel drops the SYNs, which clients resend only after 1 s, 3 s, ...
// httplib does not hand out its socket, so deepen_listen_backlog finds the socket of this process
// listening on `port` and listens again with the system's maximum backlog (Linux updates it in
// place).  Quiet when none is found.  Used by both HTTP servers (k3 serve, k3 env serve).
#pragma once

namespace k3 {

void deepen_listen_backlog(int port);

}  // namespace k3
