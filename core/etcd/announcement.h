// Announcement: a key that exists in etcd while its process lives, the liveness of a cluster's
// nodes (core/cluster/etcd_membership.h). The key is put under a lease of `ttl`, renewed every
// ttl/3; when the process dies or hangs, etcd deletes the key one ttl after the last renewal
// (plus up to 500 ms: etcd looks for expired leases twice a second), with no one else involved,
// and every watcher of the key sees it go. Where etcd cannot be reached for a ttl the lease
// expires too; the announcement then takes a new lease and puts the key again once etcd answers,
// so a node cut off and back is announced again by itself. After each renewal it reads the key:
// deleted behind its back (by an operator, or by another process that announced the same key and
// stopped) it is put again; held under another lease, two processes claim one key, which is logged
// as an error and left to them. The destructor revokes the lease: the key goes at once.
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/etcd/etcd_client.h"

namespace glimpse::etcd {

class Announcement {
 public:
  // InvalidArgument for an empty key or a ttl under 1 s. Returns at once: the key is put on the
  // announcement's thread, retried every ttl/3 while etcd does not answer. `client` outlives it;
  // its call timeout should be well under ttl/3.
  static absl::StatusOr<std::unique_ptr<Announcement>> Start(EtcdClient* client, std::string key,
                                                             std::string value, absl::Duration ttl);
  ~Announcement();

  bool announced() const;  // the key is ours in etcd as far as the last renewal and read know
  int64_t leases() const;  // leases taken so far (1 + the times the key was lost and put again)

 private:
  Announcement(EtcdClient* client, std::string key, std::string value, absl::Duration ttl);
  void Loop();
  // Takes a lease and puts the key under it; the lease, or 0 on an error (logged).
  int64_t Put();
  // Renews `lease` and checks the key is still ours (puts it again when it is gone); false when
  // the lease has expired.
  bool Renew(int64_t lease);
  void SetAnnounced(bool announced);
  // Waits `d` or until stopping; false when stopping.
  bool Sleep(absl::Duration d);

  EtcdClient* const client_;
  const std::string key_, value_;
  const absl::Duration ttl_;
  mutable absl::Mutex mu_;
  absl::CondVar stop_cv_;  // signalled when stopping_ is set
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool announced_ ABSL_GUARDED_BY(mu_) = false;
  int64_t leases_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: starts once the rest is constructed
};

}  // namespace glimpse::etcd
