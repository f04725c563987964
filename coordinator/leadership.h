// Leadership: which CoordinatorService answers this process's calls.
//
// With the state in RocksDB there is one coordinator, and always its service. With the state in
// etcd, any number of coordinators run and one leads (core/etcd/election.h, on the key
// <store.etcd_prefix>leader, whose value is the leader's advertised address): the process that
// wins a term loads the state from etcd into a service of its own, whose writes are fenced by the
// term (EtcdStateStoreOptions::guard), and drops that service when the term ends; then it
// campaigns again, and a new term loads the state afresh. Between terms Current() is UNAVAILABLE
// naming the leader, which is what a client with several coordinator addresses moves on from
// (core/cluster/coordinators.h). A store failure during a term resigns it, so that a coordinator
// that still reaches etcd takes over rather than one that refuses every change. It also watches
// the workers announced on etcd (`workers_prefix`, cluster/etcd_membership.h) and hands each term's
// service the announced set, which declares a worker dead as soon as its announcement ends.
// Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/etcd_state_store.h"
#include "core/common/clock.h"
#include "core/etcd/election.h"
#include "core/etcd/prefix_watch.h"

namespace glimpse::coordinator {

class Leadership {
 public:
  // The one coordinator, with its own store (RocksDB, or memory in tests).
  static std::unique_ptr<Leadership> Sole(std::unique_ptr<StateStore> store,
                                          std::unique_ptr<CoordinatorService> service);

  struct ElectedOptions {
    CoordinatorOptions coordinator;  // its on_store_failure is Leadership's own
    EtcdStateStoreOptions store;     // without a guard: each term sets its own
    absl::Duration ttl = absl::Seconds(5);
    absl::Duration poll = absl::Milliseconds(500);
    std::string workers_prefix;  // the nodes' membership.etcd_prefix; empty: no watch
  };
  // Campaigns once Campaign() names the address; nothing is served before.
  static absl::StatusOr<std::unique_ptr<Leadership>> Elected(ElectedOptions options, Clock* clock);
  ~Leadership();  // Stop()

  // Starts campaigning with `address` (host:port) as the value followers hand out. Only for
  // Elected; once.
  absl::Status Campaign(const std::string& address);
  // Flushes and drops the service of a term held, resigns it and stops campaigning. Once only
  // (later calls do nothing).
  void Stop();

  // The service of this process's term; UNAVAILABLE while another coordinator leads (or none).
  absl::StatusOr<std::shared_ptr<CoordinatorService>> Current() const;
  bool leading() const;
  int64_t terms() const;  // terms won by this process

 private:
  struct Incumbent;  // a term's store and service
  Leadership() = default;
  absl::Status TakeUp(const etcd::Term& term);       // Election's on_elected
  void StepDown();                                   // Election's on_deposed
  void OnAnnounced(const etcd::KeyValues& members);  // the watch's

  ElectedOptions options_;
  Clock* clock_ = nullptr;
  std::unique_ptr<etcd::EtcdClient> election_client_;
  std::unique_ptr<etcd::PrefixWatch> workers_;  // set by Campaign, dropped by Stop
  mutable absl::Mutex mu_;
  std::unique_ptr<etcd::Election> election_ ABSL_GUARDED_BY(mu_);  // null: Sole, before Campaign
  std::string address_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Incumbent> incumbent_ ABSL_GUARDED_BY(mu_);
  CoordinatorService::Announced announced_ ABSL_GUARDED_BY(mu_);  // workers, as last watched
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // Stop began: nothing is served or taken up
};

}  // namespace glimpse::coordinator
