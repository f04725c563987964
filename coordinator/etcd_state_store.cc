#include "coordinator/etcd_state_store.h"

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace glimpse::coordinator {

absl::StatusOr<std::unique_ptr<EtcdStateStore>> EtcdStateStore::Create(
    const EtcdStateStoreOptions& options) {
  if (options.prefix.empty()) return absl::InvalidArgumentError("etcd store: empty key prefix");
  ASSIGN_OR_RETURN(std::unique_ptr<etcd::EtcdClient> client,
                   etcd::EtcdClient::Create(options.etcd));
  return std::unique_ptr<EtcdStateStore>(new EtcdStateStore(options.prefix, std::move(client)));
}

absl::Status EtcdStateStore::PutNode(const NodeSpec& node) {
  return client_->Put(prefix_ + NodeKey(node.id), EncodeNode(node));
}

absl::Status EtcdStateStore::DeleteNode(const std::string& id) {
  return client_->Delete(prefix_ + NodeKey(id));
}

absl::Status EtcdStateStore::PutSession(const SessionState& session) {
  return client_->Put(prefix_ + SessionKey(session.id), EncodeSession(session));
}

absl::Status EtcdStateStore::DeleteSession(const std::string& id) {
  return client_->Delete(prefix_ + SessionKey(id));
}

absl::Status EtcdStateStore::PutEstimator(const std::string& json) {
  return client_->Put(prefix_ + kEstimatorKey, json);
}

absl::StatusOr<StoredState> EtcdStateStore::Load() {
  ASSIGN_OR_RETURN(etcd::KeyValues records, client_->GetPrefix(prefix_));
  StoredState out;
  for (const auto& [key, value] : records) {
    RETURN_IF_ERROR(AddRecord(key.substr(prefix_.size()), value, out));
  }
  return out;
}

}  // namespace glimpse::coordinator
