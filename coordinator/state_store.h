// StateStore: where the coordinator keeps what must survive its restart (DESIGN.md section 6):
// members, sessions with their leases and reservations (the budgets are rebuilt from these), and
// the lease estimator's samples. Every Put replaces the record with that key.
//
// Three implementations: RocksStateStore (rocks_state_store.h, one machine's disk),
// EtcdStateStore (etcd_state_store.h, a replicated etcd cluster) and MemoryStateStore (tests and
// the simulator). Implementations are thread-safe. Records are JSON (EncodeNode /
// EncodeSession below), so a store written by one build is readable by the next.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/types.h"

namespace glimpse::coordinator {

struct StoredState {
  std::vector<NodeSpec> nodes;
  std::vector<SessionState> sessions;
  std::string estimator_json;  // empty when never saved
};

class StateStore {
 public:
  virtual ~StateStore() = default;
  virtual absl::Status PutNode(const NodeSpec& node) = 0;
  virtual absl::Status DeleteNode(const std::string& id) = 0;
  virtual absl::Status PutSession(const SessionState& session) = 0;
  virtual absl::Status DeleteSession(const std::string& id) = 0;
  virtual absl::Status PutEstimator(const std::string& json) = 0;
  virtual absl::StatusOr<StoredState> Load() = 0;
  // Returns once every write made before the call is durable (a store that syncs: one fsync
  // serves every caller waiting at the time, so callers should call it outside their own locks).
  virtual absl::Status Durable() { return absl::OkStatus(); }
  // RESOURCE_EXHAUSTED while the store cannot take more writes safely (its disk nearly full).
  virtual absl::Status CanWrite() { return absl::OkStatus(); }
};

// The keys a persistent store files records under (behind the store's own prefix, if any), and
// the record a key and value read back are: a decode failure is DataLoss naming the key; a key of
// no known kind is skipped (written by a later build).
std::string NodeKey(const std::string& id);     // "n/<id>"
std::string SessionKey(const std::string& id);  // "s/<id>"
inline constexpr char kEstimatorKey[] = "e";
absl::Status AddRecord(const std::string& key, const std::string& value, StoredState& out);

std::string EncodeNode(const NodeSpec& node);
absl::StatusOr<NodeSpec> DecodeNode(const std::string& text);
std::string EncodeSession(const SessionState& session);
absl::StatusOr<SessionState> DecodeSession(const std::string& text);

class MemoryStateStore : public StateStore {
 public:
  absl::Status PutNode(const NodeSpec& node) override;
  absl::Status DeleteNode(const std::string& id) override;
  absl::Status PutSession(const SessionState& session) override;
  absl::Status DeleteSession(const std::string& id) override;
  absl::Status PutEstimator(const std::string& json) override;
  absl::StatusOr<StoredState> Load() override;

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> sessions_ ABSL_GUARDED_BY(mu_);
  std::string estimator_ ABSL_GUARDED_BY(mu_);
};

}  // namespace glimpse::coordinator
