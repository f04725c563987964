// RocksStateStore: the coordinator's StateStore in RocksDB (one database directory; key prefixes
// "n/" nodes, "s/" sessions, "e" the estimator). Writes go to the WAL unsynced, so the caller's
// lock is never held across an fsync; with `sync`, Durable() syncs the WAL, and concurrent callers
// share one fsync (group commit): what Durable() acknowledged survives power loss. Without `sync`
// a write survives a process crash (SIGKILL) but not the machine's. CanWrite() refuses while the
// disk has less than min_free_bytes free (checked at most every 250 ms), before RocksDB would fail
// a write. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/state_store.h"

namespace rocksdb {
class DB;
}

namespace glimpse::coordinator {

struct RocksStateStoreOptions {
  std::string path;  // directory; created when missing
  bool sync = false;
  uint64_t min_free_bytes = uint64_t{64} << 20;
};

class RocksStateStore : public StateStore {
 public:
  static absl::StatusOr<std::unique_ptr<RocksStateStore>> Open(
      const RocksStateStoreOptions& options);
  ~RocksStateStore() override;

  absl::Status PutNode(const NodeSpec& node) override;
  absl::Status DeleteNode(const std::string& id) override;
  absl::Status PutSession(const SessionState& session) override;
  absl::Status DeleteSession(const std::string& id) override;
  absl::Status PutEstimator(const std::string& json) override;
  absl::StatusOr<StoredState> Load() override;
  absl::Status Durable() override;
  absl::Status CanWrite() override;

  int64_t syncs() const;  // WAL fsyncs so far (each may cover many writes)

 private:
  RocksStateStore(std::unique_ptr<rocksdb::DB> db, const RocksStateStoreOptions& options);
  absl::Status Put(const std::string& key, const std::string& value);
  absl::Status Delete(const std::string& key);

  const std::unique_ptr<rocksdb::DB> db_;
  const RocksStateStoreOptions options_;

  std::atomic<uint64_t> written_{0};  // writes issued
  mutable absl::Mutex sync_mu_;
  absl::CondVar synced_cv_;                             // signalled when an fsync ends
  uint64_t synced_ ABSL_GUARDED_BY(sync_mu_) = 0;       // writes known durable
  bool syncing_ ABSL_GUARDED_BY(sync_mu_) = false;      // one caller runs the fsync
  absl::Status sync_failed_ ABSL_GUARDED_BY(sync_mu_);  // sticky
  int64_t syncs_ ABSL_GUARDED_BY(sync_mu_) = 0;

  absl::Mutex room_mu_;
  absl::Time room_checked_ ABSL_GUARDED_BY(room_mu_) = absl::InfinitePast();
  absl::Status room_ ABSL_GUARDED_BY(room_mu_);
};

}  // namespace glimpse::coordinator
