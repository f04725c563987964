// EtcdStateStore: the coordinator's StateStore in etcd (core/etcd/etcd_client.h), so that what
// the coordinator must not lose outlives the machine it runs on. Records go under `prefix` with
// the keys and JSON of state_store.h (<prefix>n/<id>, <prefix>s/<id>, <prefix>e). A write returns
// once a majority of the etcd cluster has committed it, so Durable() has nothing left to wait
// for. Errors are the client's: UNAVAILABLE when no etcd member answers (the service then stops
// acknowledging writes, as on a RocksDB write error), RESOURCE_EXHAUSTED when etcd's space quota
// is full; Load is DataLoss for a record that does not decode. Thread-safe.
//
// Each write is one etcd round trip, made under the coordinator's lock: a coordinator on etcd
// applies changes one at a time at etcd's commit latency (milliseconds), where RocksStateStore
// writes locally and shares one fsync outside the lock. Batching writes the same way is not done
// yet.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/state_store.h"
#include "core/etcd/etcd_client.h"

namespace glimpse::coordinator {

struct EtcdStateStoreOptions {
  etcd::EtcdOptions etcd;
  std::string prefix = "/glimpse/coordinator/";  // not empty; one per Glimpse cluster
};

class EtcdStateStore : public StateStore {
 public:
  static absl::StatusOr<std::unique_ptr<EtcdStateStore>> Create(
      const EtcdStateStoreOptions& options);

  absl::Status PutNode(const NodeSpec& node) override;
  absl::Status DeleteNode(const std::string& id) override;
  absl::Status PutSession(const SessionState& session) override;
  absl::Status DeleteSession(const std::string& id) override;
  absl::Status PutEstimator(const std::string& json) override;
  absl::StatusOr<StoredState> Load() override;

 private:
  EtcdStateStore(std::string prefix, std::unique_ptr<etcd::EtcdClient> client)
      : prefix_(std::move(prefix)), client_(std::move(client)) {}

  const std::string prefix_;
  const std::unique_ptr<etcd::EtcdClient> client_;
};

}  // namespace glimpse::coordinator
