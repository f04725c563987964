// A Glimpse service as a child process (RunServiceMain, core/common/grpc/service_main.h): started
// with fork + exec, stdout and stderr appended to a log file (so the child never blocks on a full
// pipe), ready once its "serving" log line (with grpc_port, metrics_port and api_port when the
// service has an HTTP API) appears. The destructor SIGKILLs and reaps a child that is still
// running. Every wait is bounded. Used by `glimpse up` (the local cluster), multi-process tests and
// benchmarks.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace glimpse {

class ServiceProcess {
 public:
  // `binary` is a service (e.g. glimpse-cache-node); `args` are its flags. `ready_timeout` is
  // generous: a service recovering a store on a loaded 2-core machine may take tens of seconds. The
  // kernel kills the service (SIGKILL) when the thread that started it exits, so a crashed test or
  // CLI leaves no service behind: start it from a thread that outlives it.
  static absl::StatusOr<ServiceProcess> Start(const std::string& binary,
                                              const std::vector<std::string>& args,
                                              const std::string& log_path,
                                              absl::Duration ready_timeout = absl::Seconds(60));
  // Any program (etcd in tests): ready once a line its log gains after the start satisfies
  // `ready`. The ports stay 0.
  // A start that fails (Unavailable: the child exited; DeadlineExceeded: never ready) names what
  // the child last logged at level error or worse, "msg: error" of its JSON line (as Glimpse's
  // services and etcd log), ahead of the log's tail.
  static absl::StatusOr<ServiceProcess> StartUntil(
      const std::string& binary, const std::vector<std::string>& args, const std::string& log_path,
      const std::function<bool(const std::string& line)>& ready, absl::Duration ready_timeout);
  ServiceProcess(ServiceProcess&& o) noexcept;
  ServiceProcess& operator=(ServiceProcess&& o) noexcept;
  ~ServiceProcess();

  pid_t pid() const { return pid_; }
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  int api_port() const { return api_port_; }  // the service's HTTP API; 0: none
  std::string grpc_address() const { return "127.0.0.1:" + std::to_string(grpc_port_); }

  void Kill();  // SIGKILL and reap
  // SIGTERM, then the exit code (128 + signal if killed); SIGKILL after `timeout`.
  absl::StatusOr<int> Terminate(absl::Duration timeout = absl::Seconds(10));

 private:
  ServiceProcess() = default;
  pid_t pid_ = -1;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  int api_port_ = 0;
};

// If the process `pid` exited within `timeout`, its exit code (128 + signal); else
// DeadlineExceeded.
absl::StatusOr<int> WaitExit(pid_t pid, absl::Duration timeout);

// A loopback TCP port nothing listens on now, for a child that cannot pick its own (port 0):
// picked at random below the kernel's ephemeral range, so no connection or port-0 bind of
// another process can take it meanwhile; only another caller picking the same port could, so a
// caller that can retries a failed start.
absl::StatusOr<int> FreeLoopbackPort();

// The last `max_bytes` of a file (for failure messages).
std::string Tail(const std::string& path, size_t max_bytes = 4000);

}  // namespace glimpse
