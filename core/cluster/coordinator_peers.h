// The coordinator's members as a transport PeerAllowlist (transport/peer_allowlist.h): every
// transport address a registered node stated (its ucx_address and client_ucx_addresses), dead
// nodes included until they deregister or are forgotten. The list is refreshed by ListNodes
// every `refresh`, and when an address is not on it: at once, or after waiting out `min_miss_gap`
// since the last refresh, so a node that registered a moment ago is accepted at its first batch.
// An address refused since the last refresh is refused again at once (one wait per refresh per
// outsider, at most kMaxRefused remembered). A coordinator that cannot be reached is logged and
// the last list kept: members stay accepted, newcomers wait until a retry (every `min_miss_gap`
// while failing) reaches it; a miss then refuses at once rather than wait. Peek answers from the
// list as it is: a member is allowed; an address refused since the last refresh, or any
// non-member while the coordinator cannot be reached, is refused; anything else is unknown. Each
// address is known with the node that stated it (its role and id), for Belongs.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/cluster/coordinators.h"
#include "core/common/grpc/server.h"
#include "core/transport/peer_allowlist.h"
#include "glimpse/v1/coordinator.grpc.pb.h"

namespace glimpse::cluster {

struct CoordinatorPeersOptions {
  std::vector<std::string> coordinator_addresses;  // coordinators.h
  TlsFiles tls;
  absl::Duration refresh = absl::Seconds(2);
  absl::Duration min_miss_gap = absl::Milliseconds(250);
  absl::Duration call_timeout = absl::Seconds(2);
};

class CoordinatorPeers final : public transport::PeerAllowlist {
 public:
  // Fetches the first list before returning; an unreachable coordinator is logged, not an error
  // (the list starts empty and fills when it answers).
  static absl::StatusOr<std::shared_ptr<CoordinatorPeers>> Start(CoordinatorPeersOptions options);
  ~CoordinatorPeers() override;

  bool Allows(std::string_view address) override;
  transport::PeerVerdict Peek(std::string_view address) const override;
  bool Belongs(std::string_view address, std::string_view role, std::string_view id) override;

 private:
  CoordinatorPeers(CoordinatorPeersOptions options, std::unique_ptr<Coordinators> coordinators);
  bool Known(std::string_view address) const;
  // One ListNodes; replaces the list on success. Serialised by refresh_mu_.
  absl::Status Refresh() ABSL_EXCLUSIVE_LOCKS_REQUIRED(refresh_mu_);
  void Loop();

  const CoordinatorPeersOptions options_;
  const std::unique_ptr<Coordinators> coordinators_;
  absl::Mutex refresh_mu_;  // one ListNodes at a time
  absl::Time last_refresh_ ABSL_GUARDED_BY(refresh_mu_) = absl::InfinitePast();  // attempts too
  std::atomic<bool> failing_ = false;  // the last refresh failed; written under refresh_mu_
  static constexpr size_t kMaxRefused = 1024;
  mutable absl::Mutex mu_;
  std::set<std::string, std::less<>> refused_ ABSL_GUARDED_BY(mu_);  // since the last list
  absl::CondVar cv_;  // signalled when stopping_ is set
  struct Owner {
    std::string role;  // identity.h's role names
    std::string id;
  };
  std::map<std::string, Owner, std::less<>> addresses_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace glimpse::cluster
