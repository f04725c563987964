// Membership: which prefill workers, decode workers and cache nodes exist and which are alive.
//
// A node registers (id, role, addresses, capacity), then heartbeats at least every
// `heartbeat_interval`; after `missed_heartbeats` intervals without one, Sweep declares it dead and
// returns it, and routing stops using it. A dead node comes back only by registering again; one
// dead for `forget_dead_after` is forgotten (Forget), so ids that never come back do not pile up.
// Registering an id that is alive at another address or with another role is ALREADY_EXISTS (two
// processes claiming one id); the same id at the same address is a re-registration (a restarted
// worker) and keeps the node's state. Every failing call changes nothing.
//
// Not thread-safe: the owner (CoordinatorService) serialises calls.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/types.h"

namespace glimpse::coordinator {

struct MembershipOptions {
  absl::Duration heartbeat_interval = absl::Seconds(1);
  int missed_heartbeats = 3;
  absl::Duration forget_dead_after = absl::Minutes(10);
};

class Membership {
 public:
  explicit Membership(MembershipOptions options) : options_(options) {}

  // Returns true when the id was already known at the same address (re-registration).
  absl::StatusOr<bool> Register(const NodeSpec& spec, absl::Time now);
  absl::Status Heartbeat(const std::string& id, const NodeLoad& load, absl::Time now);
  absl::Status Deregister(const std::string& id);

  // Declares dead every live node whose last heartbeat is older than the timeout; returns them.
  std::vector<std::string> Sweep(absl::Time now);
  // Declares `id` dead now (its announcement on etcd ended); false when it was not alive.
  bool Expire(const std::string& id, absl::Time now);
  // Removes every node dead for longer than forget_dead_after; returns them.
  std::vector<std::string> Forget(absl::Time now);

  // Restores a node (from the state store after a restart): alive, last heartbeat `now`, so it
  // has a full timeout to heartbeat or re-register.
  void Restore(const NodeSpec& spec, absl::Time now);

  const NodeState* Find(const std::string& id) const;  // nullptr when unknown
  const std::map<std::string, NodeState>& nodes() const { return nodes_; }
  absl::Duration timeout() const {
    return options_.heartbeat_interval * options_.missed_heartbeats;
  }
  const MembershipOptions& options() const { return options_; }

  static absl::Status ValidateSpec(const NodeSpec& spec);
  static absl::Status ValidateUcxAddresses(const NodeSpec& spec);

 private:
  const MembershipOptions options_;
  std::map<std::string, NodeState> nodes_;
};

}  // namespace glimpse::coordinator
