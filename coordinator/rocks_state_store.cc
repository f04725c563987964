#include "coordinator/rocks_state_store.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
      new RocksStateStore(std::unique_ptr<rocksdb::DB>(raw), options.sync));
}

RocksStateStore::RocksStateStore(std::unique_ptr<rocksdb::DB> db, bool sync)
    : db_(std::move(db)), sync_(sync) {}

RocksStateStore::~RocksStateStore() {
  if (db_) (void)db_->Close();
}

absl::Status RocksStateStore::Put(const std::string& key, const std::string& value) {
  rocksdb::WriteOptions wo;
  wo.sync = sync_;
  return FromRocks(db_->Put(wo, key, value), absl::StrCat("put ", key));
}

absl::Status RocksStateStore::Delete(const std::string& key) {
  rocksdb::WriteOptions wo;
  wo.sync = sync_;
  return FromRocks(db_->Delete(wo, key), absl::StrCat("delete ", key));
}

absl::Status RocksStateStore::PutNode(const NodeSpec& node) {
  return Put(absl::StrCat("n/", node.id), EncodeNode(node));
}
absl::Status RocksStateStore::DeleteNode(const std::string& id) {
  return Delete(absl::StrCat("n/", id));
}
absl::Status RocksStateStore::PutSession(const SessionState& session) {
  return Put(absl::StrCat("s/", session.id), EncodeSession(session));
}
absl::Status RocksStateStore::DeleteSession(const std::string& id) {
  return Delete(absl::StrCat("s/", id));
}
absl::Status RocksStateStore::PutEstimator(const std::string& json) { return Put("e", json); }

absl::StatusOr<StoredState> RocksStateStore::Load() {
  StoredState out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    std::string key = it->key().ToString();
    std::string value = it->value().ToString();
    if (absl::StartsWith(key, "n/")) {
      absl::StatusOr<NodeSpec> n = DecodeNode(value);
      if (!n.ok()) return absl::DataLossError(absl::StrCat(key, ": ", n.status().message()));
      out.nodes.push_back(*std::move(n));
    } else if (absl::StartsWith(key, "s/")) {
      absl::StatusOr<SessionState> s = DecodeSession(value);
      if (!s.ok()) return absl::DataLossError(absl::StrCat(key, ": ", s.status().message()));
      out.sessions.push_back(*std::move(s));
    } else if (key == "e") {
      out.estimator_json = value;
    }
  }
  if (!it->status().ok()) return FromRocks(it->status(), "scan");
  return out;
}

}  // namespace glimpse::coordinator
