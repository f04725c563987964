// A node's membership in the coordinator (proto/glimpse/v1/coordinator.proto): registers the
// node, then heartbeats at the interval the coordinator asks for with the node's load, and hands
// every session the coordinator releases (lease ended, demoted) to `release`. A coordinator that
// cannot be reached is retried with backoff and logged; a heartbeat the coordinator refuses
// (declared dead, forgotten after its restart) registers again. The destructor deregisters.
// Given several coordinators' addresses, it calls whichever leads (coordinators.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/cluster/coordinators.h"
#include "core/common/grpc/server.h"
#include "glimpse/v1/coordinator.grpc.pb.h"

namespace glimpse::cluster {

struct CoordinatorLinkOptions {
  std::vector<std::string> coordinator_addresses;  // coordinators.h
  TlsFiles tls;
  std::string node_id;
  v1::NodeRole role = v1::NODE_ROLE_DECODE;
  std::string grpc_address;  // where this node serves
  std::string ucx_address;   // the transport address peers ship to (opaque)
  // Addresses of the node's other engines (a worker's cache client): registered so that peers
  // accept their batches and ship replies to them; never handed out for routing.
  std::vector<std::string> client_ucx_addresses;
  int64_t capacity_bytes = 0;
};

class CoordinatorLink {
 public:
  static absl::StatusOr<std::unique_ptr<CoordinatorLink>> Start(
      CoordinatorLinkOptions options, std::function<v1::NodeLoad()> load,
      std::function<void(const std::string&)> release);
  ~CoordinatorLink();

  bool registered() const;
  const CoordinatorLinkOptions& options() const { return options_; }  // node id, address, role
  const std::string& incarnation() const { return incarnation_; }

 private:
  CoordinatorLink(CoordinatorLinkOptions options, std::unique_ptr<Coordinators> coordinators,
                  std::function<v1::NodeLoad()> load,
                  std::function<void(const std::string&)> release);
  void Loop();
  bool Register(absl::Duration* interval);
  bool Heartbeat();
  // Waits `d` or until stopping; false when stopping.
  bool Sleep(absl::Duration d);

  const CoordinatorLinkOptions options_;
  const std::string incarnation_;
  const std::unique_ptr<Coordinators> coordinators_;
  const std::function<v1::NodeLoad()> load_;
  const std::function<void(const std::string&)> release_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // signalled when stopping_ is set
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Starts the link once the node's gRPC port is known (nothing when
// `options.coordinator_addresses` is empty): the gRPC address becomes host:port, an empty node id
// <role>-<host>-<port>. Logs and returns null when the link cannot start.
std::unique_ptr<CoordinatorLink> RegisterWhenServing(
    CoordinatorLinkOptions options, int grpc_port, std::function<v1::NodeLoad()> load,
    std::function<void(const std::string&)> release);

}  // namespace glimpse::cluster
