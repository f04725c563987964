// A local etcd member (Debian's etcd-server) as a child process: a one-member cluster on loopback
// ports, its data and log under a directory the caller owns. What `glimpse up --etcd` runs, and
// tests and benchmarks. Start returns once the member logs that it serves clients (it is its own
// leader by then). A directory that already holds a member's data and ports starts that member
// again, with its data (a port taken meanwhile fails the start, naming it); otherwise a fresh
// member on free ports. Kill and Restart (same data, same ports) let a test lose and bring back
// the control plane's store. Start fails, saying what to install, when there is no etcd binary.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/common/service_process.h"

namespace glimpse::etcd {

class EtcdProcess {
 public:
  // `dir` is created when missing; the member's data and log go under it.
  static absl::StatusOr<std::unique_ptr<EtcdProcess>> Start(const std::string& dir);

  std::string endpoint() const;  // 127.0.0.1:<client port>
  void Kill();                   // SIGKILL, as a machine dying
  absl::Status Stop();           // SIGTERM, and the member's exit
  absl::Status Restart();        // after Kill or Stop: the same member, data and ports

 private:
  EtcdProcess(std::string dir, int client_port, int peer_port)
      : dir_(std::move(dir)), client_port_(client_port), peer_port_(peer_port) {}
  absl::Status Launch();

  const std::string dir_;
  const int client_port_;
  const int peer_port_;
  std::unique_ptr<ServiceProcess> process_;
};

}  // namespace glimpse::etcd
