// RocksStateStore: the coordinator's StateStore in RocksDB (one database directory; key prefixes
// "n/" nodes, "s/" sessions, "e" the estimator). Writes go through the WAL; with `sync` each is
// fsynced (survives power loss), without it a write survives a process crash (SIGKILL) but not
// the machine's. Thread-safe (RocksDB is).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/state_store.h"

namespace rocksdb {
class DB;
}

namespace glimpse::coordinator {

struct RocksStateStoreOptions {
  std::string path;  // directory; created when missing
  bool sync = false;
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

 private:
  RocksStateStore(std::unique_ptr<rocksdb::DB> db, bool sync);
  absl::Status Put(const std::string& key, const std::string& value);
  absl::Status Delete(const std::string& key);

  const std::unique_ptr<rocksdb::DB> db_;
  const bool sync_;
};

}  // namespace glimpse::coordinator
