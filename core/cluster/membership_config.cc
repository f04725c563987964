#include "core/cluster/membership_config.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/cluster/coordinator_peers.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"

namespace glimpse::cluster {

std::vector<ConfigKey> MembershipKeys(std::string_view role) {
  return {
      {"node_id", ConfigType::kString, "",
       absl::StrCat("Id registered with the coordinator (default ", std::string(role),
                    "-<host>-<port>).")},
      {"advertise_host", ConfigType::kString, "127.0.0.1",
       "Host the coordinator hands out for this node's gRPC port."},
      {"coordinator", ConfigType::kStringList, "",
       "Coordinator host:port to register with and heartbeat (empty: standalone); several, "
       "comma-separated, where coordinators are elected on etcd (the leader answers)."},
      {"transport.peer_allowlist", ConfigType::kBool, "true",
       "With a coordinator: UCX engines connect to, and accept batches from, only the transport "
       "addresses of nodes registered with it."},
      {"transport.allow_no_peer_failure_detection", ConfigType::kBool, "false",
       "Accept UCX shared-memory-only endpoints (cannot detect a dead peer)."},
      {"transport.local_shared_memory", ConfigType::kBool, "false",
       "Reach peers on this host (same boot, user, IPC and PID namespaces) through shared memory, "
       "without UCX's peer failure detection: faster, but UCX 1.13 aborts this process when a "
       "local peer dies during a shared-memory (CMA) transfer. Off: TCP loopback."},
      {"transport.local_receive_window", ConfigType::kBytes, "2MiB",
       "Bytes of receives posted ahead for each sender on this host (shared memory); 0: all."},
  };
}

void ApplyTransportKeys(const Config& c, transport::UcxOptions* o) {
  o->allow_no_peer_failure_detection = c.GetBool("transport.allow_no_peer_failure_detection");
  o->local_shared_memory = c.GetBool("transport.local_shared_memory");
  o->local_receive_window_bytes = static_cast<size_t>(c.GetBytes("transport.local_receive_window"));
}

CoordinatorLinkOptions LinkOptionsFromConfig(const Config& c, v1::NodeRole role,
                                             const TlsFiles& tls) {
  CoordinatorLinkOptions o;
  o.coordinator_addresses = c.GetStringList("coordinator");
  o.tls = tls;
  o.node_id = c.GetString("node_id");
  o.role = role;
  o.grpc_address = c.GetString("advertise_host");
  return o;
}

absl::StatusOr<std::shared_ptr<transport::PeerAllowlist>> PeerAllowlistFromConfig(
    const Config& c, const TlsFiles& tls) {
  const std::vector<std::string>& coordinator = c.GetStringList("coordinator");
  if (coordinator.empty() || !c.GetBool("transport.peer_allowlist")) {
    log::Warning(
        "UCX engines accept any peer",
        {{"why", coordinator.empty() ? "no coordinator" : "transport.peer_allowlist off"}});
    return nullptr;
  }
  CoordinatorPeersOptions o;
  o.coordinator_addresses = coordinator;
  o.tls = tls;
  ASSIGN_OR_RETURN(std::shared_ptr<CoordinatorPeers> peers, CoordinatorPeers::Start(o));
  return std::shared_ptr<transport::PeerAllowlist>(std::move(peers));
}

}  // namespace glimpse::cluster
