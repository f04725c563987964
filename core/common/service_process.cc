#include "core/common/service_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/common/status_macros.h"
#include "nlohmann/json.hpp"

namespace glimpse {

std::string Tail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > max_bytes ? s.substr(s.size() - max_bytes) : s;
}

namespace {

// What the child said last before it gave up: "msg: error" of the last log line at level error,
// fatal or panic written at or after byte `from`, or "" when there is none. Glimpse's services
// (core/common/log.h) and etcd alike log one JSON object per line with "level", "msg", "error".
std::string LastError(const std::string& log_path, std::streamoff from) {
  std::ifstream in(log_path);
  in.seekg(from);
  std::string line, said;
  while (std::getline(in, line)) {
    if (line.find(R"("level":"error")") == std::string::npos &&
        line.find(R"("level":"fatal")") == std::string::npos &&
        line.find(R"("level":"panic")") == std::string::npos) {
      continue;
    }
    const nlohmann::json entry = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!entry.is_object()) continue;
    auto text = [&entry](const char* key) {
      const auto it = entry.find(key);
      return it != entry.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    said = text("msg");
    if (const std::string error = text("error"); !error.empty()) {
      absl::StrAppend(&said, ": ", error);
    }
  }
  return said;
}

// Why a start failed, its own last words first (the log's tail after them can be long, and an
// excerpt of the message may keep only its start).
std::string Failure(const std::string& binary, const std::string& what, const std::string& log_path,
                    std::streamoff from) {
  const std::string said = LastError(log_path, from);
  return absl::StrCat(binary, " ", what,
                      said.empty() ? "" : absl::StrCat(" (it said \"", said, "\")"), "; log:\n",
                      Tail(log_path));
}

}  // namespace

absl::StatusOr<int> WaitExit(pid_t pid, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (r < 0) return absl::InternalError(absl::StrCat("waitpid: ", strerror(errno)));
    if (absl::Now() > end) {
      return absl::DeadlineExceededError(absl::StrCat("process ", pid, " still running"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

absl::StatusOr<ServiceProcess> ServiceProcess::Start(const std::string& binary,
                                                     const std::vector<std::string>& args,
                                                     const std::string& log_path,
                                                     absl::Duration ready_timeout) {
  // {"ts":...,"msg":"serving","program":...,"grpc_port":N,"metrics_port":M[,"api_port":A]}
  const std::regex grpc_re("\"grpc_port\":([0-9]+)"), metrics_re("\"metrics_port\":([0-9]+)"),
      api_re("\"api_port\":([0-9]+)");
  int grpc_port = 0, metrics_port = 0, api_port = 0;
  auto serving = [&](const std::string& line) {
    std::smatch g, m;
    if (line.find("\"msg\":\"serving\"") == std::string::npos ||
        !std::regex_search(line, g, grpc_re) || !std::regex_search(line, m, metrics_re)) {
      return false;
    }
    grpc_port = std::stoi(g[1]);
    metrics_port = std::stoi(m[1]);
    if (std::smatch a; std::regex_search(line, a, api_re)) api_port = std::stoi(a[1]);
    return true;
  };
  ASSIGN_OR_RETURN(ServiceProcess p, StartUntil(binary, args, log_path, serving, ready_timeout));
  p.grpc_port_ = grpc_port;
  p.metrics_port_ = metrics_port;
  p.api_port_ = api_port;
  return p;
}

absl::StatusOr<ServiceProcess> ServiceProcess::StartUntil(
    const std::string& binary, const std::vector<std::string>& args, const std::string& log_path,
    const std::function<bool(const std::string& line)>& ready, absl::Duration ready_timeout) {
  const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", log_path, ": ", strerror(errno)));
  off_t start_offset = lseek(fd, 0, SEEK_END);
  std::vector<std::string> argv = {binary};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (pid == 0) {
    // A service never outlives whoever started it (a test that crashes, a `glimpse up` killed
    // with SIGKILL): the kernel kills it when the starting thread exits.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  close(fd);
  ServiceProcess p;
  p.pid_ = pid;
  const absl::Time end = absl::Now() + ready_timeout;
  while (absl::Now() < end) {
    std::ifstream in(log_path);
    in.seekg(start_offset);
    std::string line;
    while (std::getline(in, line)) {
      if (ready(line)) return p;
    }
    if (absl::StatusOr<int> rc = WaitExit(pid, absl::ZeroDuration()); rc.ok()) {
      p.pid_ = -1;
      return absl::UnavailableError(
          Failure(binary, absl::StrCat("exited with ", *rc, " before it was ready"), log_path,
                  start_offset));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError(
      Failure(binary, "was not ready in time", log_path, start_offset));
}

ServiceProcess::ServiceProcess(ServiceProcess&& o) noexcept
    : pid_(o.pid_),
      grpc_port_(o.grpc_port_),
      metrics_port_(o.metrics_port_),
      api_port_(o.api_port_) {
  o.pid_ = -1;
}

ServiceProcess& ServiceProcess::operator=(ServiceProcess&& o) noexcept {
  if (this != &o) {
    Kill();
    pid_ = o.pid_;
    grpc_port_ = o.grpc_port_;
    metrics_port_ = o.metrics_port_;
    api_port_ = o.api_port_;
    o.pid_ = -1;
  }
  return *this;
}

ServiceProcess::~ServiceProcess() { Kill(); }

void ServiceProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  (void)WaitExit(pid_, absl::Seconds(10));
  pid_ = -1;
}

absl::StatusOr<int> ServiceProcess::Terminate(absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("not running");
  kill(pid_, SIGTERM);
  absl::StatusOr<int> rc = WaitExit(pid_, timeout);
  if (!rc.ok()) {
    Kill();
    return rc;
  }
  pid_ = -1;
  return rc;
}

namespace {

// Whether 127.0.0.1:`port` can be bound now (0: any; the port bound is returned).
int Bindable(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(a);
  int bound = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    bound = ntohs(a.sin_port);
  }
  close(fd);
  return bound;
}

// The first port of the kernel's ephemeral range (what outgoing connections and port-0 binds
// get), 32768 when it cannot be read.
int EphemeralLow() {
  int low = 0, high = 0;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  if (range >> low >> high && low > 1024) return low;
  return 32768;
}

}  // namespace

absl::StatusOr<int> FreeLoopbackPort() {
  // Below the ephemeral range: no connection another process opens can take it before the child
  // binds it, only someone picking the same port at random.
  constexpr int kLowest = 10000;
  const int high = EphemeralLow();
  if (high > kLowest) {
    static thread_local std::mt19937 rng(std::random_device{}());
    std::uniform_int_distribution<int> pick(kLowest, high - 1);
    for (int attempt = 0; attempt < 100; ++attempt) {
      const int port = pick(rng);
      if (Bindable(port) == port) return port;
    }
  }
  const int port = Bindable(0);
  if (port <= 0) return absl::InternalError("no free port on 127.0.0.1");
  return port;
}

}  // namespace glimpse
