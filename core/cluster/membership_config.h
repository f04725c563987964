// The config keys every node of a cluster has for its membership, and what they give: the link
// options for registering with the coordinator and the allowlist for the node's UCX engines.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cluster/coordinator_link.h"
#include "core/common/config.h"
#include "core/transport/peer_allowlist.h"
#include "core/transport/ucx/ucx_transport.h"

namespace glimpse::cluster {

// node_id, advertise_host, coordinator, transport.peer_allowlist,
// transport.allow_no_peer_failure_detection, transport.local_shared_memory and
// transport.local_receive_window. `role` names the default node id ("decode" →
// decode-<host>-<port>).
std::vector<ConfigKey> MembershipKeys(std::string_view role);

// The node's UCX engine options among those keys (allow_no_peer_failure_detection,
// local_shared_memory, local_receive_window_bytes).
void ApplyTransportKeys(const Config& c, transport::UcxOptions* o);

// All of CoordinatorLinkOptions but the addresses and capacity; grpc_address is the host.
CoordinatorLinkOptions LinkOptionsFromConfig(const Config& c, v1::NodeRole role,
                                             const TlsFiles& tls);

// The coordinator's members (coordinator_peers.h) when a coordinator is configured and
// transport.peer_allowlist is on; else null, and the engines accept any peer (logged).
absl::StatusOr<std::shared_ptr<transport::PeerAllowlist>> PeerAllowlistFromConfig(
    const Config& c, const TlsFiles& tls);

}  // namespace glimpse::cluster
