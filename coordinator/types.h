// Domain types shared by the coordinator's parts (membership, budgets, leases, routing, store).
// Plain values, no gRPC or protobuf: the adapter (coordinator_grpc.h) converts.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"

namespace glimpse::coordinator {

enum class NodeRole { kPrefill = 1, kDecode = 2, kCache = 3 };
std::string_view NodeRoleName(NodeRole role);

// What a node states about itself when it registers.
struct NodeSpec {
  std::string id;
  NodeRole role = NodeRole::kDecode;
  std::string grpc_address;  // host:port
  std::string ucx_address;   // opaque UCX worker address blob
  int64_t capacity_bytes = 0;
  // Changes whenever the node's process starts; "" when the node does not say. A re-registration
  // with another incarnation means the node restarted and lost its hot KV.
  std::string incarnation;
  // Addresses of the node's other transport engines (a worker's cache client): members of the
  // UCX peer allowlist, never routed to.
  std::vector<std::string> client_ucx_addresses;
};

// Bounds on a node's stated transport addresses.
inline constexpr size_t kMaxClientUcxAddresses = 8;
inline constexpr size_t kMaxUcxAddressBytes = 64 * 1024;

// What a node reports with each heartbeat.
struct NodeLoad {
  int64_t queue_length = 0;
  int64_t used_bytes = 0;
  int64_t hot_sessions = 0;
};

struct NodeState {
  NodeSpec spec;
  NodeLoad load;
  absl::Time last_heartbeat = absl::InfinitePast();
  bool alive = true;
  absl::Time dead_since = absl::InfinitePast();
};

// Where a session's KV is (DESIGN.md section 3: hot = decode worker, warm/cold = cache nodes).
enum class SessionTier { kActive = 1, kLeased = 2, kWarm = 3 };
std::string_view SessionTierName(SessionTier tier);

struct SessionState {
  std::string id;
  std::string tenant;
  SessionTier tier = SessionTier::kWarm;
  std::string decode_worker;      // where it is (or was last) hot
  int64_t kv_tokens = 0;          // KV tokens held after the last turn
  int64_t summarised_tokens = 0;  // conversation tokens its state summarises (>= kv_tokens)
  int64_t reserved_bytes = 0;     // bytes in the worker and tenant budgets (0 when warm)
  int32_t turns = 0;              // turns routed so far
  std::string tool;               // tool named at the last EndTurn
  absl::Time turn_started = absl::InfinitePast();
  absl::Time turn_ended = absl::InfinitePast();  // InfinitePast while no turn has ended
  absl::Duration ttl = absl::ZeroDuration();
  absl::Time lease_expires = absl::InfinitePast();
  bool last_route_hot = false;  // the running or last turn was a hot hit
  bool tool_reported = true;    // the pause since turn_ended was already recorded
};

}  // namespace glimpse::coordinator
