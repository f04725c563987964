#include "core/common/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "core/common/status_macros.h"

namespace glimpse {
namespace {

constexpr size_t kMaxRequestBytes = 8 * 1024;

std::string Errno() { return std::strerror(errno); }

// Closes a file descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Waits until `fd` is ready for `events`, the deadline passes (false) or `wake_fd` becomes
// readable (false: the server is stopping). wake_fd < 0 means none.
bool WaitFor(int fd, short events, absl::Time deadline, int wake_fd) {
  for (;;) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return false;
    pollfd fds[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    const int n = poll(fds, wake_fd >= 0 ? 2 : 1, static_cast<int>(std::min<int64_t>(ms, 1000)));
    if (n < 0 && errno != EINTR) return false;
    if (n <= 0) continue;
    if (wake_fd >= 0 && fds[1].revents != 0) return false;
    if (fds[0].revents != 0) return true;
  }
}

bool SendAll(int fd, absl::string_view data, absl::Time deadline, int wake_fd) {
  while (!data.empty()) {
    if (!WaitFor(fd, POLLOUT, deadline, wake_fd)) return false;
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

HttpResponse Plain(int status, std::string body) {
  return HttpResponse{status, "text/plain; charset=utf-8", std::move(body)};
}

std::string Serialize(const HttpResponse& response) {
  std::string out = absl::StrCat("HTTP/1.1 ", response.status, " ", Reason(response.status),
                                 "\r\nContent-Type: ", response.content_type,
                                 "\r\nContent-Length: ", response.body.size(), "\r\n");
  if (response.status == 405) out += "Allow: GET\r\n";
  return absl::StrCat(out, "Connection: close\r\n\r\n", response.body);
}

// Answers one request head (everything before the blank line).
HttpResponse Route(absl::string_view head,
                   const std::map<std::string, HttpServer::Handler, std::less<>>& routes) {
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  const std::vector<absl::string_view> parts = absl::StrSplit(lines[0], ' ');
  if (parts.size() != 3 || parts[0].empty() || parts[1].empty() || parts[1][0] != '/' ||
      !absl::StartsWith(parts[2], "HTTP/1.")) {
    return Plain(400, "malformed request line\n");
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].find(':') == absl::string_view::npos) return Plain(400, "malformed header\n");
  }
  if (parts[0] != "GET") return Plain(405, absl::StrCat("method ", parts[0], " not allowed\n"));
  const absl::string_view path = parts[1].substr(0, parts[1].find('?'));
  const auto it = routes.find(path);
  if (it == routes.end()) return Plain(404, absl::StrCat("no such path: ", path, "\n"));
  return it->second();
}

class HttpServerImpl final : public HttpServer {
 public:
  HttpServerImpl(Fd listen_fd, Fd wake_read, Fd wake_write, int port, absl::Duration io_timeout,
                 std::map<std::string, Handler> routes)
      : listen_fd_(std::move(listen_fd)),
        wake_read_(std::move(wake_read)),
        wake_write_(std::move(wake_write)),
        port_(port),
        io_timeout_(io_timeout),
        routes_(routes.begin(), routes.end()) {
    for (int i = 0; i < kHttpConnectionThreads; ++i) {
      workers_.emplace_back([this] { ServeLoop(); });
    }
    thread_ = std::thread([this] { AcceptLoop(); });
  }

  ~HttpServerImpl() override {
    const char c = 'x';
    (void)!write(wake_write_.get(), &c, 1);  // wakes every poll in the server's threads
    thread_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  int port() const override { return port_; }

 private:
  void AcceptLoop() {
    for (;;) {
      if (!WaitFor(listen_fd_.get(), POLLIN, absl::InfiniteFuture(), wake_read_.get())) return;
      Fd conn(accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (conn.get() < 0) continue;
      std::lock_guard<std::mutex> lock(mu_);
      if (queued_.size() >= kHttpMaxQueued) continue;  // closed: too many wait already
      queued_.push_back(std::move(conn));
      ready_.notify_one();
    }
  }

  void ServeLoop() {
    for (;;) {
      Fd conn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [&] { return stopping_ || !queued_.empty(); });
        if (stopping_) return;  // connections still queued are closed with the deque
        conn = std::move(queued_.front());
        queued_.pop_front();
      }
      Serve(conn.get());
    }
  }

  void Serve(int fd) {
    const absl::Time deadline = absl::Now() + io_timeout_;
    std::string request;
    size_t head_end;
    while ((head_end = request.find("\r\n\r\n")) == std::string::npos) {
      if (request.size() > kMaxRequestBytes) {
        SendAll(fd, Serialize(Plain(400, "request head over 8 KiB\n")), deadline, wake_read_.get());
        return;
      }
      if (!WaitFor(fd, POLLIN, deadline, wake_read_.get())) return;  // stalled or stopping
      char buf[2048];
      const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return;  // the client went away mid-request
      request.append(buf, static_cast<size_t>(n));
    }
    const HttpResponse response =
        head_end > kMaxRequestBytes
            ? Plain(400, "request head over 8 KiB\n")
            : Route(absl::string_view(request).substr(0, head_end), routes_);
    SendAll(fd, Serialize(response), deadline, wake_read_.get());
    shutdown(fd, SHUT_WR);
  }

  const Fd listen_fd_;
  const Fd wake_read_;  // readable once the destructor runs
  const Fd wake_write_;
  const int port_;
  const absl::Duration io_timeout_;
  const std::map<std::string, Handler, std::less<>> routes_;
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<Fd> queued_;  // GUARDED_BY(mu_): accepted, waiting for a connection thread
  bool stopping_ = false;  // GUARDED_BY(mu_)
  std::vector<std::thread> workers_;
  std::thread thread_;  // accepts; started last
};

absl::StatusOr<addrinfo*> Resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve ", host, ":", port, ": ", gai_strerror(rc)));
  }
  return result;
}

absl::StatusOr<Fd> Listen(const std::string& host, int port) {
  ASSIGN_OR_RETURN(addrinfo * addrs, Resolve(host, port, /*passive=*/true));
  std::string error = "no address";
  Fd fd;
  for (addrinfo* a = addrs; a != nullptr; a = a->ai_next) {
    Fd candidate(socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (candidate.get() < 0) {
      error = Errno();
      continue;
    }
    const int one = 1;
    setsockopt(candidate.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(candidate.get(), a->ai_addr, a->ai_addrlen) == 0 && listen(candidate.get(), 64) == 0) {
      fd = std::move(candidate);
      break;
    }
    error = Errno();
  }
  freeaddrinfo(addrs);
  if (fd.get() < 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", port, ": ", error));
  }
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const HttpServerOptions& options, std::map<std::string, Handler> routes) {
  ASSIGN_OR_RETURN(Fd listen_fd, Listen(options.host, options.port));
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe for the HTTP server: ", Errno()));
  }
  const int port = BoundPort(listen_fd.get());
  return std::make_unique<HttpServerImpl>(std::move(listen_fd), Fd(pipe_fds[0]), Fd(pipe_fds[1]),
                                          port, options.io_timeout, std::move(routes));
}

absl::StatusOr<std::string> HttpGet(const std::string& host, int port, const std::string& path) {
  const std::string where = absl::StrCat(host, ":", port, path);
  ASSIGN_OR_RETURN(addrinfo * addrs, Resolve(host, port, /*passive=*/false));
  Fd fd;
  for (addrinfo* a = addrs; a != nullptr && fd.get() < 0; a = a->ai_next) {
    Fd candidate(socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (candidate.get() >= 0 && connect(candidate.get(), a->ai_addr, a->ai_addrlen) == 0) {
      fd = std::move(candidate);
    }
  }
  freeaddrinfo(addrs);
  if (fd.get() < 0) return absl::UnavailableError(absl::StrCat("GET ", where, ": ", Errno()));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", host, ":", port,
                                           "\r\nConnection: close\r\n\r\n");
  if (!SendAll(fd.get(), request, deadline, -1)) {
    return absl::UnavailableError(absl::StrCat("GET ", where, ": send failed"));
  }
  std::string response;
  for (;;) {
    if (!WaitFor(fd.get(), POLLIN, deadline, -1)) {
      return absl::DeadlineExceededError(absl::StrCat("GET ", where, ": no response"));
    }
    char buf[4096];
    const ssize_t n = recv(fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) break;  // Connection: close ends the body
    response.append(buf, static_cast<size_t>(n));
  }
  const size_t head_end = response.find("\r\n\r\n");
  int status = 0;
  const std::vector<absl::string_view> status_line =
      absl::StrSplit(absl::string_view(response).substr(0, response.find("\r\n")), ' ');
  if (head_end == std::string::npos || status_line.size() < 2 ||
      !absl::SimpleAtoi(status_line[1], &status)) {
    return absl::DataLossError(absl::StrCat("GET ", where, ": malformed response"));
  }
  if (status != 200) {
    const std::string message = absl::StrCat("GET ", where, ": HTTP ", status);
    if (status == 404) return absl::NotFoundError(message);
    return status >= 500 ? absl::UnavailableError(message) : absl::InvalidArgumentError(message);
  }
  return response.substr(head_end + 4);
}

absl::StatusOr<HttpServerOptions> ParseHttpAddress(const std::string& address,
                                                   std::string_view key) {
  HttpServerOptions options;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(address).substr(colon + 1), &options.port) ||
      options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad value for ", std::string(key), ": '", address, "' (want host:port)"));
  }
  absl::string_view host = absl::string_view(address).substr(0, colon);
  if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
  options.host = std::string(host);
  return options;
}

}  // namespace glimpse
