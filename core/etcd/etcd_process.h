// A local etcd member (Debian's etcd-server) as a child process: a one-member cluster on loopback
// ports, its data and log under a directory the caller owns. What `glimpse up --etcd` runs, and
// tests and benchmarks. Start returns once the member logs that it serves clients (it is its own
// leader by then). A directory that already holds a member's data and ports starts that member
// again, with its data (a port taken meanwhile fails the start, naming it); otherwise a fresh
// member on free ports. Kill and Restart (same data, same ports) let a test lose and bring back
// the control plane's store. StartCluster runs several members, for tests of losing one. Start
// fails, saying what to install, when there is no etcd binary.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/grpc/server.h"
#include "core/common/service_process.h"

namespace glimpse::etcd {

class EtcdProcess {
 public:
  // `dir` is created when missing; the member's data and log go under it. With `tls` (cert, key
  // and CA), clients must connect over TLS with a certificate that CA signed (etcd's
  // --client-cert-auth); peers stay plaintext on loopback. With `also_listen_on` (an address of
  // this host), clients may connect there too, at the same port (processes in other network
  // namespaces, core/common/netns.h).
  static absl::StatusOr<std::unique_ptr<EtcdProcess>> Start(const std::string& dir,
                                                            const TlsFiles& tls = {},
                                                            const std::string& also_listen_on = "");
  // A cluster of `members` (odd, at least 1), member i under <dir>/member-<i>, started together
  // (none serves before a majority runs); fresh each time.
  static absl::StatusOr<std::vector<std::unique_ptr<EtcdProcess>>> StartCluster(
      const std::string& dir, int members);

  std::string endpoint() const;  // 127.0.0.1:<client port>
  void Kill();                   // SIGKILL, as a machine dying
  absl::Status Stop();           // SIGTERM, and the member's exit
  absl::Status Restart();        // after Kill or Stop: the same member, data and ports

 private:
  EtcdProcess(std::string dir, std::string name, int client_port, int peer_port, TlsFiles tls = {},
              std::string also_listen_on = "")
      : dir_(std::move(dir)),
        name_(std::move(name)),
        client_port_(client_port),
        peer_port_(peer_port),
        tls_(std::move(tls)),
        also_listen_on_(std::move(also_listen_on)) {}
  static absl::StatusOr<std::vector<std::unique_ptr<EtcdProcess>>> StartClusterOnce(
      const std::string& dir, int members);  // on ports picked free now
  std::string peer_url() const;
  // `initial_cluster`: name=peer_url,... of every member (read only when the data is new);
  // returns once the member logs a line with `ready`.
  absl::Status Launch(const std::string& initial_cluster, std::string_view ready);

  const std::string dir_;
  const std::string name_;
  const int client_port_;
  const int peer_port_;
  const TlsFiles tls_;
  const std::string also_listen_on_;
  std::string initial_cluster_;  // as last launched
  std::unique_ptr<ServiceProcess> process_;
};

}  // namespace glimpse::etcd
