// The cluster's nodes that are alive, on etcd, without the coordinator: each node announces
// itself under `<prefix><role>/<name>` on a lease of `ttl` (core/etcd/announcement.h), so a node
// that dies or is cut off from etcd leaves the membership one ttl later, and joining and leaving
// are seen as they happen, not at the next poll:
//   - cache nodes as `cache/<gRPC address>` (value: the address); every worker and cache node
//     watches `<prefix>cache/` (core/etcd/prefix_watch.h) and places states over the nodes it
//     lists (core/cache_client/placement.h);
//   - workers as `decode/<node id>/<incarnation>` and `prefill/...` (value: the gRPC address); the
//     leading coordinator watches those and declares a worker dead as soon as it is gone
//     (coordinator/leadership.h), before it misses its heartbeats.
//
// The node lists are the workers' `cache_node` and the nodes' `replication.peers` until etcd
// first answers; from then on the live members. A worker or node with no membership.etcd_endpoints
// keeps its configured list (the embedded default: `glimpse up`, `make run`). Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/common/config.h"
#include "core/common/grpc/server.h"
#include "core/etcd/announcement.h"
#include "core/etcd/etcd_client.h"
#include "core/etcd/prefix_watch.h"

namespace glimpse::cluster {

struct EtcdMembershipOptions {
  std::vector<std::string> etcd_endpoints;  // empty: no membership on etcd
  TlsFiles etcd_tls;
  std::string prefix = "/glimpse/members/";
  absl::Duration ttl = absl::Seconds(3);
};

// membership.etcd_endpoints, membership.etcd_prefix, membership.etcd_ca/cert/key, membership.ttl.
std::vector<ConfigKey> EtcdMembershipKeys();
EtcdMembershipOptions EtcdMembershipFromConfig(const Config& c);
// InvalidArgument for what Start would refuse (no endpoints, a ttl under 1 s, an unreadable TLS
// file), so that a service refuses to start rather than run unannounced.
absl::Status CheckEtcdMembership(const EtcdMembershipOptions& options);

class EtcdMembership {
 public:
  using OnChange = std::function<void(const std::vector<std::string>&)>;
  // Watches the live cache nodes: `on_cache_nodes` gets their addresses (sorted) once etcd
  // answered and after every change, on the watch's thread (null: no watch). InvalidArgument
  // without endpoints or a ttl under 1 s.
  static absl::StatusOr<std::unique_ptr<EtcdMembership>> Start(const EtcdMembershipOptions& options,
                                                               OnChange on_cache_nodes);
  ~EtcdMembership();  // leaves (an announced node goes from the membership at once)

  // Announces this node as `<prefix><role>/<name>` = `value` from now on; once.
  absl::Status Announce(const std::string& role, const std::string& name, const std::string& value);
  bool announced() const;  // false before Announce

 private:
  explicit EtcdMembership(const EtcdMembershipOptions& options) : options_(options) {}

  const EtcdMembershipOptions options_;
  std::unique_ptr<etcd::EtcdClient> client_;
  std::unique_ptr<etcd::PrefixWatch> watch_;
  mutable absl::Mutex mu_;
  std::unique_ptr<etcd::Announcement> announcement_ ABSL_GUARDED_BY(mu_);
};

// Where workers announce themselves: `<prefix><role>/<node id>/<incarnation>` (the incarnation
// keeps a restarted worker's key apart from its predecessor's, which may outlive it by a ttl).
std::string WorkerAnnouncement(const std::string& node_id, const std::string& incarnation);
// The node id and incarnation in a worker's announcement key past `<prefix><role>/`; nullopt for
// another key.
std::optional<std::pair<std::string, std::string>> ParseWorkerAnnouncement(
    std::string_view key_past_role);

}  // namespace glimpse::cluster
