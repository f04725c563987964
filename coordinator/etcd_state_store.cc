#include "coordinator/etcd_state_store.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"

namespace glimpse::coordinator {
namespace {

constexpr size_t kMaxTxnBytes = size_t{1} << 20;  // below etcd's default --max-request-bytes

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdStateStore>> EtcdStateStore::Create(
    const EtcdStateStoreOptions& options) {
  if (options.prefix.empty()) return absl::InvalidArgumentError("etcd store: empty key prefix");
  ASSIGN_OR_RETURN(std::unique_ptr<etcd::EtcdClient> client,
                   etcd::EtcdClient::Create(options.etcd));
  return std::unique_ptr<EtcdStateStore>(new EtcdStateStore(options, std::move(client)));
}

EtcdStateStore::EtcdStateStore(const EtcdStateStoreOptions& options,
                               std::unique_ptr<etcd::EtcdClient> client)
    : prefix_(options.prefix),
      guard_(options.guard),
      retry_for_(options.retry_for),
      client_(std::move(client)),
      flusher_([this] { FlushLoop(); }) {}

EtcdStateStore::~EtcdStateStore() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  flusher_.join();
}

absl::Status EtcdStateStore::Queue(std::string key, std::optional<std::string> value) {
  absl::MutexLock lock(&mu_);
  if (!failed_.ok()) return failed_;
  queued_[prefix_ + key] = std::move(value);  // a later write of a key replaces an earlier one
  ++written_;
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::Status EtcdStateStore::PutNode(const NodeSpec& node) {
  return Queue(NodeKey(node.id), EncodeNode(node));
}

absl::Status EtcdStateStore::DeleteNode(const std::string& id) {
  return Queue(NodeKey(id), std::nullopt);
}

absl::Status EtcdStateStore::PutSession(const SessionState& session) {
  return Queue(SessionKey(session.id), EncodeSession(session));
}

absl::Status EtcdStateStore::DeleteSession(const std::string& id) {
  return Queue(SessionKey(id), std::nullopt);
}

absl::Status EtcdStateStore::PutEstimator(const std::string& json) {
  if (json.size() > kMaxTxnBytes) {
    log::Warning("estimator samples too large for one etcd value; the last saved ones stay",
                 {{"bytes", static_cast<long long>(json.size())},
                  {"max_bytes", static_cast<long long>(kMaxTxnBytes)}});
    return absl::OkStatus();
  }
  return Queue(kEstimatorKey, json);
}

absl::Status EtcdStateStore::Durable() {
  absl::MutexLock lock(&mu_);
  const uint64_t target = written_;
  while (committed_ < target && failed_.ok()) changed_.Wait(&mu_);
  return failed_;
}

int64_t EtcdStateStore::transactions() const {
  absl::MutexLock lock(&mu_);
  return transactions_;
}

void EtcdStateStore::FlushLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    while (queued_.empty() && !stopping_) changed_.Wait(&mu_);
    if (queued_.empty()) return;  // stopping, nothing left
    Queued batch;
    batch.swap(queued_);
    const uint64_t upto = written_;
    // A failed store sends nothing more: what it acknowledged stays as it was.
    absl::Status sent = failed_;
    if (sent.ok()) {
      mu_.Unlock();
      sent = Send(batch);
      mu_.Lock();
    }
    if (sent.ok()) {
      committed_ = upto;
    } else if (failed_.ok()) {
      failed_ = sent;
    }
    changed_.SignalAll();
  }
}

absl::Status EtcdStateStore::Send(const Queued& batch) {
  std::vector<etcd::EtcdClient::Write> txn;
  size_t bytes = 0;
  for (const auto& [key, value] : batch) {
    const size_t size = key.size() + (value.has_value() ? value->size() : 0);
    if (!txn.empty() &&
        (txn.size() == etcd::EtcdClient::kMaxTxnOps || bytes + size > kMaxTxnBytes)) {
      RETURN_IF_ERROR(Commit(txn));
      {
        absl::MutexLock lock(&mu_);
        ++transactions_;
      }
      txn.clear();
      bytes = 0;
    }
    txn.emplace_back(key, value);
    bytes += size;
  }
  RETURN_IF_ERROR(Commit(txn));
  absl::MutexLock lock(&mu_);
  ++transactions_;
  return absl::OkStatus();
}

absl::Status EtcdStateStore::Commit(const std::vector<etcd::EtcdClient::Write>& txn) {
  // Sending a batch again is safe: it puts the same values, after every earlier batch, and the
  // guard still holds it to this term.
  const absl::Time give_up = absl::Now() + retry_for_;
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    absl::Status st = client_->Apply(txn, guard_);
    if (!absl::IsUnavailable(st) || absl::Now() + backoff > give_up) return st;
    log::Warning("etcd: no member took a transaction; retrying", {{"error", st.ToString()}});
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(500));
  }
}

absl::StatusOr<StoredState> EtcdStateStore::Load() {
  RETURN_IF_ERROR(Durable());  // what this process wrote is read back too
  ASSIGN_OR_RETURN(etcd::KeyValues records, client_->GetPrefix(prefix_));
  StoredState out;
  for (const auto& [key, value] : records) {
    RETURN_IF_ERROR(AddRecord(key.substr(prefix_.size()), value, out));
  }
  return out;
}

}  // namespace glimpse::coordinator
