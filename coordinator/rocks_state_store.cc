#include "coordinator/rocks_state_store.h"

#include <sys/statvfs.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/common/status_macros.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"

namespace glimpse::coordinator {
namespace {

absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("coordinator store: ", std::string(what), ": ", s.ToString()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RocksStateStore>> RocksStateStore::Open(
    const RocksStateStoreOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("coordinator store: empty path");
  rocksdb::Options opts;
  opts.create_if_missing = true;
  opts.max_open_files = 64;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(opts, options.path, &raw);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrFormat(
        "coordinator store: cannot open RocksDB at %s: %s", options.path, s.ToString()));
  }
  return std::unique_ptr<RocksStateStore>(
      new RocksStateStore(std::unique_ptr<rocksdb::DB>(raw), options));
}

RocksStateStore::RocksStateStore(std::unique_ptr<rocksdb::DB> db,
                                 const RocksStateStoreOptions& options)
    : db_(std::move(db)), options_(options) {}

RocksStateStore::~RocksStateStore() {
  if (db_) (void)db_->Close();
}

absl::Status RocksStateStore::Put(const std::string& key, const std::string& value) {
  const absl::Status s = FromRocks(db_->Put({}, key, value), absl::StrCat("put ", key));
  written_.fetch_add(1);
  return s;
}

absl::Status RocksStateStore::Delete(const std::string& key) {
  const absl::Status s = FromRocks(db_->Delete({}, key), absl::StrCat("delete ", key));
  written_.fetch_add(1);
  return s;
}

absl::Status RocksStateStore::Durable() {
  if (!options_.sync) return absl::OkStatus();
  const uint64_t mine = written_.load();
  absl::MutexLock lock(&sync_mu_);
  while (sync_failed_.ok() && synced_ < mine) {
    if (syncing_) {  // the fsync under way may not cover `mine`: wait, then look again
      synced_cv_.Wait(&sync_mu_);
      continue;
    }
    syncing_ = true;
    const uint64_t covered = written_.load();  // every write issued so far is in the WAL
    sync_mu_.Unlock();  // not held across the fsync; taken again before `lock` ends
    const absl::Status s = FromRocks(db_->SyncWAL(), "sync the WAL");
    sync_mu_.Lock();
    syncing_ = false;
    ++syncs_;
    if (s.ok()) synced_ = std::max(synced_, covered);
    if (!s.ok()) sync_failed_ = s;
    synced_cv_.SignalAll();
  }
  return sync_failed_;
}

int64_t RocksStateStore::syncs() const {
  absl::MutexLock lock(&sync_mu_);
  return syncs_;
}

absl::Status RocksStateStore::CanWrite() {
  absl::MutexLock lock(&room_mu_);
  const absl::Time now = absl::Now();
  if (now - room_checked_ < absl::Milliseconds(250)) return room_;
  room_checked_ = now;
  struct statvfs st;
  if (statvfs(options_.path.c_str(), &st) != 0) {
    room_ = absl::OkStatus();  // cannot tell: RocksDB's own errors still fail-stop
    return room_;
  }
  const uint64_t free = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  room_ = free >= options_.min_free_bytes
              ? absl::OkStatus()
              : absl::ResourceExhaustedError(absl::StrFormat(
                    "coordinator store: the disk under %s has %d bytes free, under "
                    "store.min_free_bytes = %d; no change is accepted until there is room",
                    options_.path, free, options_.min_free_bytes));
  return room_;
}

absl::Status RocksStateStore::PutNode(const NodeSpec& node) {
  return Put(NodeKey(node.id), EncodeNode(node));
}
absl::Status RocksStateStore::DeleteNode(const std::string& id) { return Delete(NodeKey(id)); }
absl::Status RocksStateStore::PutSession(const SessionState& session) {
  return Put(SessionKey(session.id), EncodeSession(session));
}
absl::Status RocksStateStore::DeleteSession(const std::string& id) {
  return Delete(SessionKey(id));
}
absl::Status RocksStateStore::PutEstimator(const std::string& json) {
  return Put(kEstimatorKey, json);
}

absl::StatusOr<StoredState> RocksStateStore::Load() {
  StoredState out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    RETURN_IF_ERROR(AddRecord(it->key().ToString(), it->value().ToString(), out));
  }
  if (!it->status().ok()) return FromRocks(it->status(), "scan");
  return out;
}

}  // namespace glimpse::coordinator
