// EtcdStateStore: the coordinator's StateStore in etcd (core/etcd/etcd_client.h), so that what
// the coordinator must not lose outlives the machine it runs on. Records go under `prefix` with
// the keys and JSON of state_store.h (<prefix>n/<id>, <prefix>s/<id>, <prefix>e).
//
// Writes are group-committed, as RocksStateStore's fsyncs are: Put and Delete queue the record
// and return at once (the coordinator calls them under its lock), a flusher thread sends what is
// queued to etcd as transactions (the last write of each key, at most 128 keys and 1 MiB each),
// and Durable() returns once every write made before it is committed by a majority of the etcd
// cluster, or with the first failure: UNAVAILABLE when no etcd member answers (for retry_for),
// RESOURCE_EXHAUSTED
// when etcd's space quota is full, FAILED_PRECONDITION once the guard's term is over. A failure
// is sticky (the service then stops acknowledging writes, as on a RocksDB write error); what was
// queued is then not all in etcd. Load is DataLoss for a record that does not decode. Estimator
// samples over 1 MiB (one etcd value must fit one request) are not saved, with a warning: the
// last saved samples stay, as they are a best-effort record anyway (saved every few seconds).
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/state_store.h"
#include "core/etcd/etcd_client.h"

namespace glimpse::coordinator {

struct EtcdStateStoreOptions {
  etcd::EtcdOptions etcd;
  std::string prefix = "/glimpse/coordinator/";  // not empty; one per Glimpse cluster
  // With several coordinators, the leader's term (core/etcd/election.h): every transaction is
  // made on condition that the term's leader key is unchanged, so a deposed leader writes nothing.
  std::optional<etcd::EtcdClient::Guard> guard;
  // A transaction no etcd member answered (one dead, the others electing a new raft leader,
  // which takes about a second) is sent again until this long after its first try.
  absl::Duration retry_for = absl::Seconds(5);
};

class EtcdStateStore : public StateStore {
 public:
  static absl::StatusOr<std::unique_ptr<EtcdStateStore>> Create(
      const EtcdStateStoreOptions& options);
  ~EtcdStateStore() override;  // flushes what is queued first

  absl::Status PutNode(const NodeSpec& node) override;
  absl::Status DeleteNode(const std::string& id) override;
  absl::Status PutSession(const SessionState& session) override;
  absl::Status DeleteSession(const std::string& id) override;
  absl::Status PutEstimator(const std::string& json) override;
  absl::StatusOr<StoredState> Load() override;
  absl::Status Durable() override;

  int64_t transactions() const;  // sent to etcd so far (benchmarks: writes per transaction)

 private:
  using Queued =
      std::map<std::string, std::optional<std::string>>;  // key -> value; nullopt: delete

  EtcdStateStore(const EtcdStateStoreOptions& options, std::unique_ptr<etcd::EtcdClient> client);
  absl::Status Queue(std::string key, std::optional<std::string> value);
  void FlushLoop();
  absl::Status Send(const Queued& batch);  // as transactions of at most 128 keys and 1 MiB
  absl::Status Commit(const std::vector<etcd::EtcdClient::Write>& txn);  // one, with retries

  const std::string prefix_;
  const std::optional<etcd::EtcdClient::Guard> guard_;
  const absl::Duration retry_for_;
  const std::unique_ptr<etcd::EtcdClient> client_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // a write queued, a batch committed or failed, or stopping
  Queued queued_ ABSL_GUARDED_BY(mu_);
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;    // writes queued so far
  uint64_t committed_ ABSL_GUARDED_BY(mu_) = 0;  // of those, the first this many are in etcd
  absl::Status failed_ ABSL_GUARDED_BY(mu_);     // sticky
  int64_t transactions_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread flusher_;  // last: starts once the rest is constructed
};

}  // namespace glimpse::coordinator
