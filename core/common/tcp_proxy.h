// TcpProxy: forwards TCP connections from a loopback port to an upstream address, until Cut,
// which drops every connection through it and refuses new ones (each is accepted and closed at
// once) until Restore: a network partition between one client and one server for tests of what
// a process does when it loses a peer it still believes in (no CAP_NET_ADMIN needed). Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace glimpse {

class TcpProxy {
 public:
  // Listens on a free 127.0.0.1 port; `upstream` is host:port (IPv4 or a name).
  static absl::StatusOr<std::unique_ptr<TcpProxy>> Start(std::string upstream);
  ~TcpProxy();

  std::string address() const;  // 127.0.0.1:<port>: what the client is given
  void Cut();
  void Restore();

 private:
  TcpProxy(std::string upstream, int listen_fd, int port);
  void AcceptLoop();
  void Pump(int from, int to);
  int ConnectUpstream() const;

  const std::string upstream_;
  const int listen_fd_;
  const int port_;
  absl::Mutex mu_;
  bool cut_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int> open_fds_ ABSL_GUARDED_BY(mu_);  // both ends of every live connection
  std::vector<std::thread> pumps_ ABSL_GUARDED_BY(mu_);
  std::thread acceptor_;  // last: starts once the rest is constructed
};

}  // namespace glimpse
