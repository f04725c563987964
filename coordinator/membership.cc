#include "coordinator/membership.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "proto/limits.h"

namespace glimpse::coordinator {

std::string_view NodeRoleName(NodeRole role) {
  switch (role) {
    case NodeRole::kPrefill:
      return "prefill";
    case NodeRole::kDecode:
      return "decode";
    case NodeRole::kCache:
      return "cache";
  }
  return "unknown";
}

std::string_view SessionTierName(SessionTier tier) {
  switch (tier) {
    case SessionTier::kActive:
      return "active";
    case SessionTier::kLeased:
      return "leased";
    case SessionTier::kWarm:
      return "warm";
  }
  return "unknown";
}

absl::Status Membership::ValidateUcxAddresses(const NodeSpec& spec) {
  if (spec.ucx_address.size() > kMaxUcxAddressBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("node %s: ucx_address is %d bytes (at most %d)", spec.id,
                        spec.ucx_address.size(), kMaxUcxAddressBytes));
  }
  if (spec.client_ucx_addresses.size() > kMaxClientUcxAddresses) {
    return absl::InvalidArgumentError(
        absl::StrFormat("node %s: %d client_ucx_addresses (at most %d)", spec.id,
                        spec.client_ucx_addresses.size(), kMaxClientUcxAddresses));
  }
  for (size_t i = 0; i < spec.client_ucx_addresses.size(); ++i) {
    const size_t n = spec.client_ucx_addresses[i].size();
    if (n == 0 || n > kMaxUcxAddressBytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("node %s: client_ucx_addresses[%d] is %d bytes (1 to %d)", spec.id, i, n,
                          kMaxUcxAddressBytes));
    }
  }
  return absl::OkStatus();
}

absl::Status Membership::ValidateSpec(const NodeSpec& spec) {
  RETURN_IF_ERROR(v1::CheckId("node_id", spec.id));
  if (spec.role != NodeRole::kPrefill && spec.role != NodeRole::kDecode &&
      spec.role != NodeRole::kCache) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "node %s: role %d is not prefill, decode or cache", spec.id, static_cast<int>(spec.role)));
  }
  size_t colon = spec.grpc_address.rfind(':');
  if (spec.grpc_address.empty() || colon == std::string::npos || colon == 0 ||
      colon + 1 == spec.grpc_address.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "node %s: grpc_address \"%s\" is not host:port", spec.id, spec.grpc_address));
  }
  RETURN_IF_ERROR(ValidateUcxAddresses(spec));
  if (spec.capacity_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("node %s: capacity_bytes %d is negative", spec.id, spec.capacity_bytes));
  }
  if (spec.role != NodeRole::kPrefill && spec.capacity_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("node %s: a %s node needs capacity_bytes > 0",
                                                      spec.id, NodeRoleName(spec.role)));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Membership::Register(const NodeSpec& spec, absl::Time now) {
  RETURN_IF_ERROR(ValidateSpec(spec));
  auto it = nodes_.find(spec.id);
  bool known = it != nodes_.end();
  if (known && it->second.alive &&
      (it->second.spec.grpc_address != spec.grpc_address || it->second.spec.role != spec.role)) {
    const NodeState& old = it->second;
    return absl::AlreadyExistsError(absl::StrFormat(
        "node %s is registered alive as %s at %s (last heartbeat %s ago); refusing %s at %s: "
        "deregister it first or wait until it is declared dead",
        spec.id, NodeRoleName(old.spec.role), old.spec.grpc_address,
        absl::FormatDuration(now - old.last_heartbeat), NodeRoleName(spec.role),
        spec.grpc_address));
  }
  bool same_address = known && it->second.spec.grpc_address == spec.grpc_address &&
                      it->second.spec.role == spec.role;
  NodeState& node = nodes_[spec.id];
  node.spec = spec;
  node.alive = true;
  node.last_heartbeat = now;
  node.dead_since = absl::InfinitePast();
  if (!same_address) node.load = NodeLoad{};
  return same_address;
}

absl::Status Membership::Heartbeat(const std::string& id, const NodeLoad& load, absl::Time now) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) {
    return absl::NotFoundError(
        absl::StrFormat("heartbeat from unknown node \"%s\": register first", id));
  }
  if (load.queue_length < 0 || load.used_bytes < 0 || load.hot_sessions < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("node %s: negative load (queue_length %d, used_bytes %d, hot_sessions %d)",
                        id, load.queue_length, load.used_bytes, load.hot_sessions));
  }
  if (!it->second.alive) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "node %s was declared dead %s ago (no heartbeat for %s); register again", id,
        absl::FormatDuration(now - it->second.dead_since), absl::FormatDuration(timeout())));
  }
  it->second.load = load;
  it->second.last_heartbeat = now;
  return absl::OkStatus();
}

absl::Status Membership::Deregister(const std::string& id) {
  if (nodes_.erase(id) == 0) {
    return absl::NotFoundError(absl::StrFormat("deregister: unknown node \"%s\"", id));
  }
  return absl::OkStatus();
}

std::vector<std::string> Membership::Sweep(absl::Time now) {
  std::vector<std::string> dead;
  for (auto& [id, node] : nodes_) {
    if (node.alive && now - node.last_heartbeat > timeout()) {
      node.alive = false;
      node.dead_since = now;
      dead.push_back(id);
    }
  }
  return dead;
}

bool Membership::Expire(const std::string& id, absl::Time now) {
  auto it = nodes_.find(id);
  if (it == nodes_.end() || !it->second.alive) return false;
  it->second.alive = false;
  it->second.dead_since = now;
  return true;
}

std::vector<std::string> Membership::Forget(absl::Time now) {
  std::vector<std::string> gone;
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    if (!it->second.alive && now - it->second.dead_since > options_.forget_dead_after) {
      gone.push_back(it->first);
      it = nodes_.erase(it);
    } else {
      ++it;
    }
  }
  return gone;
}

void Membership::Restore(const NodeSpec& spec, absl::Time now) {
  NodeState& node = nodes_[spec.id];
  node.spec = spec;
  node.alive = true;
  node.last_heartbeat = now;
}

const NodeState* Membership::Find(const std::string& id) const {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

}  // namespace glimpse::coordinator
