// PrefixWatch: a live copy of the keys under an etcd prefix, for whoever must follow them (the
// cache nodes that are alive, core/cluster/etcd_membership.h) without polling. It reads the keys
// (GetPrefix, one revision), hands them to `on_change`, then watches from that revision on and
// hands the whole set over again after every change. When the watch ends (the member died or
// lost its raft leader, the revision was compacted, the stream broke) it reads the keys again
// after `retry` and watches from there, so no change is lost, only delayed; the set it hands over
// is always one etcd had at some revision.
//
// `on_change` runs on the watch's thread, never twice at once, with every key and its value in
// key order (the prefix included). Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/etcd/etcd_client.h"

namespace glimpse::etcd {

class PrefixWatch {
 public:
  using OnChange = std::function<void(const KeyValues&)>;
  // InvalidArgument for an empty prefix or a retry not above zero. `client` outlives the watch.
  static absl::StatusOr<std::unique_ptr<PrefixWatch>> Start(
      EtcdClient* client, std::string prefix, OnChange on_change,
      absl::Duration retry = absl::Seconds(1));
  ~PrefixWatch();  // ends the watch; on_change is not called after it returns

  int64_t reads() const;  // times the keys were read whole (1 + the watches that ended)

 private:
  PrefixWatch(EtcdClient* client, std::string prefix, OnChange on_change, absl::Duration retry);
  void Loop();
  // Reads the keys, hands them over and watches until the watch ends; why it ended.
  absl::Status ReadAndWatch();
  bool Stopping() const;

  EtcdClient* const client_;
  const std::string prefix_;
  const OnChange on_change_;
  const absl::Duration retry_;
  mutable absl::Mutex mu_;
  absl::CondVar stop_cv_;  // signalled when stopping_ is set
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* watching_ ABSL_GUARDED_BY(mu_) = nullptr;  // the watch in progress
  int64_t reads_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: starts once the rest is constructed
};

}  // namespace glimpse::etcd
