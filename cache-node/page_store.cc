#include "cache-node/page_store.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/common/status_macros.h"
#include "rocksdb/cache.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace glimpse::cache_node {
namespace {

constexpr char kPagesCf[] = "pages";
constexpr char kManifestsCf[] = "manifests";
constexpr char kMetaCf[] = "meta";
constexpr char kPinPrefix[] = "pin/";
constexpr char kTombstonePrefix[] = "del/";
constexpr char kFormatKey[] = "format";

void PutBe32(std::string& out, uint32_t v) {
  const char b[4] = {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
  out.append(b, 4);
}

rocksdb::Slice AsSlice(const StateKey& k) {
  return {reinterpret_cast<const char*>(k.data()), k.size()};
}

std::string PinKey(const StateKey& k) {
  std::string out(kPinPrefix);
  out.append(reinterpret_cast<const char*>(k.data()), k.size());
  return out;
}

std::string TombstoneKey(const StateKey& k) {
  std::string out(kTombstonePrefix);
  out.append(reinterpret_cast<const char*>(k.data()), k.size());
  return out;
}

rocksdb::ColumnFamilyOptions CfOptions(const PageStoreOptions& o,
                                       const std::shared_ptr<rocksdb::Cache>& cache) {
  rocksdb::ColumnFamilyOptions cf;
  cf.write_buffer_size = o.write_buffer_bytes;
  // Pages are already compact (kvpage codecs) and checksummed: no compression, like db_bench's
  // --compression_type=none baseline.
  cf.compression = rocksdb::kNoCompression;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = cache;
  // XXH3 block checksums (db_bench's default), not the library's CRC32C: the Debian RocksDB is a
  // portable build whose CRC32C runs in software at ~0.5 GB/s here (`db_bench
  // --benchmarks=crc32c,xxh3`: 0.54 vs 5.6 GB/s), which made verifying a 1 MiB state read from an
  // SST file cost ~1.5 ms. Files written before keep (and are verified with) CRC32C.
  table.checksum = rocksdb::kXXH3;
  cf.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return cf;
}

}  // namespace

absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  const std::string msg = absl::StrCat(std::string(what), ": ", s.ToString());
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(absl::StrCat("disk full: ", msg));
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsIOError() || s.IsBusy() || s.IsTimedOut() || s.IsTryAgain() || s.IsShutdownInProgress()) {
    return absl::UnavailableError(msg);
  }
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(msg);
  return absl::InternalError(msg);
}

std::string PageKey(const StateKey& state, uint32_t layer, uint32_t kv_head, uint32_t index) {
  std::string out(reinterpret_cast<const char*>(state.data()), state.size());
  PutBe32(out, layer);
  PutBe32(out, kv_head);
  PutBe32(out, index);
  return out;
}

// Free bytes on the filesystem that holds `path` (or its nearest existing parent).
absl::StatusOr<uint64_t> FreeBytes(const std::string& path) {
  std::filesystem::path p = std::filesystem::absolute(path);
  std::error_code ec;
  while (!std::filesystem::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) {
    p = p.parent_path();
  }
  struct statvfs st;
  if (statvfs(p.c_str(), &st) != 0) {
    return absl::UnavailableError(absl::StrCat("statvfs ", p.string(), ": ", strerror(errno)));
  }
  return uint64_t{st.f_bavail} * st.f_frsize;
}

absl::StatusOr<std::unique_ptr<PageStore>> PageStore::Open(const PageStoreOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("storage path is empty");
  if (options.env == nullptr && options.min_free_bytes > 0) {
    ASSIGN_OR_RETURN(uint64_t free, FreeBytes(options.path));
    if (free < options.min_free_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "disk full: ", free, " bytes free on the filesystem of ", options.path,
          ", storage.min_free_bytes is ", options.min_free_bytes, "; free space and restart"));
    }
  }
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.env = options.env != nullptr ? options.env : rocksdb::Env::Default();
  db_options.max_total_wal_size = 4 * options.write_buffer_bytes;
  db_options.enable_pipelined_write = true;  // WAL and memtable writes of concurrent puts overlap
  db_options.manifest_preallocation_size = 256 << 10;  // not 4 MiB of a small disk per MANIFEST
  std::shared_ptr<rocksdb::Cache> cache = rocksdb::NewLRUCache(options.block_cache_bytes);
  const rocksdb::ColumnFamilyOptions cf = CfOptions(options, cache);
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
      {rocksdb::kDefaultColumnFamilyName, cf}, {kPagesCf, cf}, {kManifestsCf, cf}, {kMetaCf, cf}};
  std::unique_ptr<PageStore> store(new PageStore());
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_options, options.path, cfs, &store->handles_, &db);
  if (!s.ok()) return FromRocks(s, absl::StrCat("opening RocksDB at ", options.path));
  store->db_.reset(db);
  store->pages_ = store->handles_[1];
  store->manifests_ = store->handles_[2];
  store->meta_ = store->handles_[3];
  store->write_options_.sync = options.sync;
  store->path_ = options.path;
  store->guard_space_ = options.env == nullptr;
  store->reserve_bytes_ = options.min_free_bytes + 2 * options.write_buffer_bytes;
  store->write_options_.disableWAL = false;
  std::string format;
  s = db->Get(rocksdb::ReadOptions(), store->meta_, kFormatKey, &format);
  if (s.IsNotFound()) {
    s = db->Put(store->write_options_, store->meta_, kFormatKey, "1");
  } else if (s.ok() && format != "1") {
    return absl::FailedPreconditionError(
        absl::StrCat("store at ", options.path, " has format ", format, ", this build reads 1"));
  }
  if (!s.ok()) return FromRocks(s, "reading the store format record");
  return store;
}

PageStore::~PageStore() {
  if (!db_) return;
  for (rocksdb::ColumnFamilyHandle* h : handles_) db_->DestroyColumnFamilyHandle(h);
  (void)db_->Close();
}

void PageStore::AddDeletes(rocksdb::WriteBatch& batch, const Manifest& m) {
  for (const kvstate::PageRef& p : m.pages) {
    batch.Delete(pages_, PageKey(m.state_key, p.layer, p.kv_head, p.index));
  }
  batch.Delete(manifests_, AsSlice(m.state_key));
  batch.Delete(meta_, PinKey(m.state_key));
}

absl::Status PageStore::Commit(const Manifest& m, std::span<const std::span<const uint8_t>> pages,
                               std::span<const Manifest> victims) {
  if (pages.size() != m.pages.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("commit of ", pages.size(), " pages for a manifest of ", m.pages.size()));
  }
  rocksdb::WriteBatch batch(m.total_page_bytes() + 64 * pages.size() + 4096);
  for (const Manifest& v : victims) AddDeletes(batch, v);
  for (size_t i = 0; i < pages.size(); ++i) {
    const kvstate::PageRef& p = m.pages[i];
    batch.Put(pages_, PageKey(m.state_key, p.layer, p.kv_head, p.index),
              rocksdb::Slice(reinterpret_cast<const char*>(pages[i].data()), pages[i].size()));
  }
  batch.Put(manifests_, AsSlice(m.state_key), kvstate::EncodeManifest(m));
  batch.Delete(meta_, TombstoneKey(m.state_key));
  return Write(batch, "writing a state", batch.GetDataSize());
}

absl::Status PageStore::Write(rocksdb::WriteBatch& batch, std::string_view what,
                              uint64_t incoming) {
  {
    absl::MutexLock lock(&failed_mu_);
    if (!failed_.ok()) return failed_;
  }
  if (guard_space_ && incoming > 0) {
    ASSIGN_OR_RETURN(uint64_t free, FreeBytes(path_));
    if (free < incoming + reserve_bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("disk full: ", free, " bytes free on the filesystem of ", path_, "; ",
                       std::string(what), " needs ", incoming, " bytes plus a reserve of ",
                       reserve_bytes_, " (storage.min_free_bytes + 2 x storage.write_buffer)"));
    }
  }
  absl::Status s = FromRocks(db_->Write(write_options_, &batch), what);
  if (!s.ok()) {
    absl::MutexLock lock(&failed_mu_);
    if (failed_.ok())
      failed_ = absl::Status(
          s.code(), absl::StrCat(s.message(), " (writes stopped until the node restarts)"));
  }
  return s;
}

absl::Status PageStore::Delete(std::span<const Manifest> states,
                               std::optional<int64_t> tombstone_micros) {
  rocksdb::WriteBatch batch;
  for (const Manifest& m : states) {
    AddDeletes(batch, m);
    if (tombstone_micros.has_value()) {
      batch.Put(meta_, TombstoneKey(m.state_key), absl::StrCat(*tombstone_micros));
    }
  }
  return Write(batch, "deleting states", 0);
}

absl::StatusOr<std::vector<std::pair<StateKey, int64_t>>> PageStore::LoadTombstones() {
  std::vector<std::pair<StateKey, int64_t>> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), meta_));
  for (it->Seek(kTombstonePrefix); it->Valid() && it->key().starts_with(kTombstonePrefix);
       it->Next()) {
    rocksdb::Slice k = it->key();
    k.remove_prefix(sizeof(kTombstonePrefix) - 1);
    int64_t micros = 0;
    if (k.size() != 16 || !absl::SimpleAtoi(it->value().ToString(), &micros)) {
      return absl::DataLossError("a tombstone record is malformed");
    }
    StateKey key;
    std::memcpy(key.data(), k.data(), 16);
    out.emplace_back(key, micros);
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "scanning tombstones"));
  return out;
}

absl::Status PageStore::AddTombstone(const StateKey& key, int64_t micros) {
  rocksdb::WriteBatch batch;
  batch.Put(meta_, TombstoneKey(key), absl::StrCat(micros));
  return Write(batch, "writing a tombstone", 0);
}

absl::Status PageStore::DropTombstones(std::span<const StateKey> keys) {
  rocksdb::WriteBatch batch;
  for (const StateKey& k : keys) batch.Delete(meta_, TombstoneKey(k));
  return Write(batch, "dropping tombstones", 0);
}

absl::StatusOr<Manifest> PageStore::ReadManifest(const StateKey& key) {
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), manifests_, AsSlice(key), &value);
  if (s.IsNotFound()) {
    return absl::NotFoundError(absl::StrCat("no state stored under key ", kvpage::ToHex(key)));
  }
  RETURN_IF_ERROR(FromRocks(s, "reading a manifest"));
  return kvstate::DecodeManifest(value.ToStringView());
}

absl::StatusOr<StoredPages> PageStore::Read(const StateKey& key, const Selector& selection,
                                            bool fill_cache) {
  const rocksdb::Snapshot* snap = db_->GetSnapshot();
  struct Release {
    rocksdb::DB* db;
    const rocksdb::Snapshot* snap;
    ~Release() { db->ReleaseSnapshot(snap); }
  } release{db_.get(), snap};
  rocksdb::ReadOptions ro;
  ro.snapshot = snap;
  ro.verify_checksums = true;
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db_->Get(ro, manifests_, AsSlice(key), &value);
  if (s.IsNotFound()) {
    return absl::NotFoundError(absl::StrCat("no state stored under key ", kvpage::ToHex(key)));
  }
  RETURN_IF_ERROR(FromRocks(s, "reading a manifest"));
  StoredPages out;
  ASSIGN_OR_RETURN(out.manifest, kvstate::DecodeManifest(value.ToStringView()));
  if (selection) {
    ASSIGN_OR_RETURN(out.selected, selection(out.manifest));
  } else {
    out.selected.resize(out.manifest.pages.size());
    for (size_t i = 0; i < out.selected.size(); ++i) out.selected[i] = i;
  }
  const size_t n = out.selected.size();
  std::vector<std::string> keys(n);
  std::vector<rocksdb::Slice> slices(n);
  for (size_t i = 0; i < n; ++i) {
    const kvstate::PageRef& p = out.manifest.pages[out.selected[i]];
    keys[i] = PageKey(key, p.layer, p.kv_head, p.index);
    slices[i] = keys[i];
  }
  out.bytes.resize(n);
  std::vector<rocksdb::Status> statuses(n);
  ro.fill_cache = fill_cache;
  db_->MultiGet(ro, pages_, n, slices.data(), out.bytes.data(), statuses.data(), true);
  for (size_t i = 0; i < n; ++i) {
    if (statuses[i].IsNotFound()) {
      return absl::DataLossError(
          absl::StrCat("state ", kvpage::ToHex(key), " has a manifest but page ",
                       kvstate::PageName(out.manifest.pages[out.selected[i]]), " is missing"));
    }
    RETURN_IF_ERROR(FromRocks(statuses[i], "reading a page"));
  }
  return out;
}

absl::Status PageStore::SetPinned(const StateKey& key, bool pinned) {
  rocksdb::WriteBatch batch;
  if (pinned) {
    batch.Put(meta_, PinKey(key), "");
  } else {
    batch.Delete(meta_, PinKey(key));
  }
  return Write(batch, pinned ? "writing a pin" : "removing a pin", 0);
}

absl::Status PageStore::ForEachManifest(const std::function<void(Manifest)>& fn) {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), manifests_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    absl::StatusOr<Manifest> m = kvstate::DecodeManifest(it->value().ToStringView());
    if (!m.ok()) {
      return absl::DataLossError(absl::StrCat("manifest under key ", it->key().ToString(true), ": ",
                                              m.status().message()));
    }
    fn(*std::move(m));
  }
  return FromRocks(it->status(), "scanning manifests");
}

absl::StatusOr<std::vector<StateKey>> PageStore::LoadPins() {
  std::vector<StateKey> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), meta_));
  for (it->Seek(kPinPrefix); it->Valid() && it->key().starts_with(kPinPrefix); it->Next()) {
    rocksdb::Slice k = it->key();
    k.remove_prefix(sizeof(kPinPrefix) - 1);
    if (k.size() != 16) return absl::DataLossError("pin record with a malformed key");
    StateKey key;
    std::memcpy(key.data(), k.data(), 16);
    out.push_back(key);
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "scanning pins"));
  return out;
}

PageStore::Sizes PageStore::GetSizes() {
  Sizes s;
  uint64_t v = 0;
  for (rocksdb::ColumnFamilyHandle* h : handles_) {
    if (db_->GetIntProperty(h, rocksdb::DB::Properties::kTotalSstFilesSize, &v)) s.sst_bytes += v;
    if (db_->GetIntProperty(h, rocksdb::DB::Properties::kSizeAllMemTables, &v)) {
      s.memtable_bytes += v;
    }
    if (db_->GetIntProperty(h, rocksdb::DB::Properties::kEstimatePendingCompactionBytes, &v)) {
      s.pending_compaction_bytes += v;
    }
  }
  if (db_->GetIntProperty(rocksdb::DB::Properties::kNumRunningCompactions, &v)) {
    s.background_jobs += v;
  }
  if (db_->GetIntProperty(rocksdb::DB::Properties::kNumRunningFlushes, &v)) {
    s.background_jobs += v;
  }
  rocksdb::VectorLogPtr files;
  if (db_->GetSortedWalFiles(files).ok()) {
    for (const auto& f : files) s.wal_bytes += f->SizeFileBytes();
  }
  return s;
}

absl::Status PageStore::Flush() {
  rocksdb::FlushOptions fo;
  return FromRocks(db_->Flush(fo, handles_), "flushing");
}

}  // namespace glimpse::cache_node
