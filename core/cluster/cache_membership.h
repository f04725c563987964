// The cache nodes that are alive, on etcd, without the coordinator: each cache node announces its
// gRPC address under `<prefix>cache/<address>` on a lease of `ttl` (core/etcd/announcement.h), so
// a node that dies or is cut off from etcd leaves the membership one ttl later; every worker and
// cache node watches that prefix (core/etcd/prefix_watch.h) and places states over the nodes it
// lists (core/cache_client/placement.h). Joining and leaving are seen as they happen, not at the
// next poll.
//
// The node lists are the workers' `cache_node` and the nodes' `replication.peers` until etcd
// first answers; from then on the live members. A worker or node with no membership.etcd_endpoints
// keeps its configured list (the embedded default: `glimpse up`, `make run`). Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/common/config.h"
#include "core/common/grpc/server.h"
#include "core/etcd/announcement.h"
#include "core/etcd/etcd_client.h"
#include "core/etcd/prefix_watch.h"

namespace glimpse::cluster {

struct CacheMembershipOptions {
  std::vector<std::string> etcd_endpoints;  // empty: no membership on etcd
  TlsFiles etcd_tls;
  std::string prefix = "/glimpse/members/";
  absl::Duration ttl = absl::Seconds(3);
};

// membership.etcd_endpoints, membership.etcd_prefix, membership.etcd_ca/cert/key, membership.ttl.
std::vector<ConfigKey> CacheMembershipKeys();
CacheMembershipOptions CacheMembershipFromConfig(const Config& c);
// InvalidArgument for what Start would refuse (no endpoints, a ttl under 1 s, an unreadable TLS
// file), so that a service refuses to start rather than run unannounced.
absl::Status CheckCacheMembership(const CacheMembershipOptions& options);

class CacheMembership {
 public:
  using OnChange = std::function<void(const std::vector<std::string>&)>;
  // Watches the live cache nodes: `on_change` gets their addresses (sorted) once etcd answered
  // and after every change, on the watch's thread. With `announce` (this cache node's gRPC
  // host:port), announces it too. InvalidArgument without endpoints or a ttl under 1 s.
  static absl::StatusOr<std::unique_ptr<CacheMembership>> Start(
      const CacheMembershipOptions& options, std::string announce, OnChange on_change);
  ~CacheMembership();  // leaves (an announced node goes from the membership at once)

  bool announced() const;  // false without `announce`

 private:
  CacheMembership() = default;

  std::unique_ptr<etcd::EtcdClient> client_;
  std::unique_ptr<etcd::Announcement> announcement_;
  std::unique_ptr<etcd::PrefixWatch> watch_;
};

}  // namespace glimpse::cluster
