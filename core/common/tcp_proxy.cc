#include "core/common/tcp_proxy.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace glimpse {
namespace {

constexpr int kPollMs = 100;  // how soon the acceptor notices Stop

absl::Status Errno(const char* what) {
  return absl::InternalError(absl::StrCat("tcp proxy: ", what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpProxy>> TcpProxy::Start(std::string upstream) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const absl::Status st = Errno("listen");
    close(fd);
    return st;
  }
  return std::unique_ptr<TcpProxy>(new TcpProxy(std::move(upstream), fd, ntohs(addr.sin_port)));
}

TcpProxy::TcpProxy(std::string upstream, int listen_fd, int port)
    : upstream_(std::move(upstream)),
      listen_fd_(listen_fd),
      port_(port),
      acceptor_([this] { AcceptLoop(); }) {}

TcpProxy::~TcpProxy() {
  std::vector<std::thread> pumps;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (int fd : open_fds_) shutdown(fd, SHUT_RDWR);
  }
  acceptor_.join();
  {
    absl::MutexLock lock(&mu_);
    pumps.swap(pumps_);
  }
  for (std::thread& t : pumps) t.join();
  absl::MutexLock lock(&mu_);
  for (int fd : open_fds_) close(fd);
  close(listen_fd_);
}

std::string TcpProxy::address() const { return absl::StrCat("127.0.0.1:", port_); }

void TcpProxy::Cut() {
  absl::MutexLock lock(&mu_);
  cut_ = true;
  // shutdown, not close: the pumps still own the descriptors and see their reads end.
  for (int fd : open_fds_) shutdown(fd, SHUT_RDWR);
}

void TcpProxy::Restore() {
  absl::MutexLock lock(&mu_);
  cut_ = false;
}

int TcpProxy::ConnectUpstream() const {
  const size_t colon = upstream_.rfind(':');
  const std::string host = upstream_.substr(0, colon);
  const std::string port = upstream_.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) return -1;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    close(fd);
    freeaddrinfo(found);
    return -1;
  }
  freeaddrinfo(found);
  return fd;
}

void TcpProxy::AcceptLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, kPollMs) <= 0) continue;
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    bool cut;
    {
      absl::MutexLock lock(&mu_);
      cut = cut_;
    }
    const int server = cut ? -1 : ConnectUpstream();
    if (server < 0) {
      close(client);
      continue;
    }
    absl::MutexLock lock(&mu_);
    open_fds_.push_back(client);
    open_fds_.push_back(server);
    pumps_.emplace_back([this, client, server] { Pump(client, server); });
    pumps_.emplace_back([this, client, server] { Pump(server, client); });
  }
}

void TcpProxy::Pump(int from, int to) {
  char buf[64 * 1024];
  while (true) {
    const ssize_t n = read(from, buf, sizeof(buf));
    if (n <= 0) break;
    ssize_t sent = 0;
    while (sent < n) {
      const ssize_t w = send(to, buf + sent, n - sent, MSG_NOSIGNAL);
      if (w <= 0) break;
      sent += w;
    }
    if (sent < n) break;
  }
  // Either end gone: end both directions (the other pump's read then returns).
  shutdown(from, SHUT_RDWR);
  shutdown(to, SHUT_RDWR);
}

}  // namespace glimpse
