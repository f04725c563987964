// PageStore: the cache node's cold tier, a RocksDB database with three column families:
//   pages      state key ‖ layer ‖ kv_head ‖ index (u32 big-endian each) → encoded page (kvpage)
//   manifests  state key → EncodeManifest(manifest) (kvstate/manifest.h)
//   meta       "pin/" ‖ state key → "" for every pinned state; "del/" ‖ state key → deletion
//              time (unix µs, decimal) for every state deleted on request, its tombstone, so that
//              replication does not copy it back (cache-node/replicator.h); "format" → "1"
// Everything else (prefix index, retention order, byte totals) is derived from the manifests when
// the node opens, so there is no second copy that could drift from them.
//
// Contract:
//   - Commit(m, pages, victims) writes every page, then the manifest, and deletes every victim
//     state (pages, manifest, pin) in ONE WriteBatch, so a state is visible (its manifest readable)
//     only with all its pages. It returns OK only after DB::Write returned OK with the configured
//     durability (WAL always on; WriteOptions::sync = Options::sync, i.e. fsync per batch). On any
//     error nothing of the batch is visible.
//   - Read(key, selection) reads the manifest and the chosen pages under one snapshot, so a
//     concurrent delete yields NotFound, never a manifest without its pages.
//   - After a write that RocksDB failed (not one the disk-full guard below refused) the store is
//     fail-stop for writes (reads go on): later Commit, Delete and SetPinned return that first
//     error again until the node restarts, so RocksDB never reuses a WAL writer that failed.
//   - RocksDB errors map to absl codes: NoSpace → ResourceExhausted ("disk full"), other IO errors
//     and a database stopped by a background error → Unavailable, Corruption → DataLoss; messages
//     name the operation and carry RocksDB's text.
// Thread-safe (RocksDB's own guarantees); no caching here (the warm tier is separate).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/kvstate/manifest.h"
#include "rocksdb/db.h"

namespace glimpse::cache_node {

using kvstate::Manifest;
using kvstate::StateKey;

struct PageStoreOptions {
  std::string path;                              // database directory (created if missing)
  bool sync = true;                              // fsync the WAL on every Commit / delete
  size_t write_buffer_bytes = size_t{64} << 20;  // memtable size per column family
  size_t block_cache_bytes = size_t{256} << 20;  // RocksDB block cache (pages + manifests)
  rocksdb::Env* env = nullptr;                   // test seam; nullptr = rocksdb::Env::Default()
  // Disk-full guard (real filesystem only, i.e. env == nullptr). Open refuses when the
  // filesystem holding `path` has less free space than min_free_bytes, and Commit refuses a batch
  // unless batch + min_free_bytes + 2 × write_buffer_bytes (room for memtable flushes) is free;
  // both with ResourceExhausted "disk full: ..." naming the sizes. Why not let RocksDB hit ENOSPC:
  // the Debian RocksDB 7.8 build keeps assertions, and a WAL append that failed for lack of space
  // followed by another write aborts the process in WritableFileWriter.
  uint64_t min_free_bytes = uint64_t{1} << 20;
};

// The manifest and the pages a reader asked for, read under one snapshot.
struct StoredPages {
  Manifest manifest;                          // the whole stored manifest
  std::vector<size_t> selected;               // indices into manifest.pages, in manifest order
  std::vector<rocksdb::PinnableSlice> bytes;  // bytes[i] is page manifest.pages[selected[i]]
};

class PageStore {
 public:
  static absl::StatusOr<std::unique_ptr<PageStore>> Open(const PageStoreOptions& options);
  ~PageStore();  // flushes nothing extra: every acknowledged write is already in the WAL

  // Also drops m's tombstone, if any (a state stored again after its deletion).
  absl::Status Commit(const Manifest& m, std::span<const std::span<const uint8_t>> pages,
                      std::span<const Manifest> victims);
  // Deletes the states (pages, manifest, pin record) in one WriteBatch; with `tombstone_micros`,
  // leaves a tombstone of that time for each in the same batch.
  absl::Status Delete(std::span<const Manifest> states,
                      std::optional<int64_t> tombstone_micros = std::nullopt);
  // Every tombstone: the state key and its deletion time (unix µs).
  absl::StatusOr<std::vector<std::pair<StateKey, int64_t>>> LoadTombstones();
  absl::Status DropTombstones(std::span<const StateKey> keys);
  absl::Status AddTombstone(const StateKey& key, int64_t micros);  // for a state not stored

  // NotFound when no manifest is stored under `key`.
  absl::StatusOr<Manifest> ReadManifest(const StateKey& key);
  // `selection` picks manifest pages (nullopt: all); it is called with the stored manifest, before
  // any page is read. `fill_cache` = false reads pages around the block cache (for a state about
  // to enter the warm tier, which would otherwise be cached twice). RocksDB verifies the block
  // checksums of whatever it reads from a file.
  using Selector = std::function<absl::StatusOr<std::vector<size_t>>(const Manifest&)>;
  absl::StatusOr<StoredPages> Read(const StateKey& key, const Selector& selection = nullptr,
                                   bool fill_cache = true);

  absl::Status SetPinned(const StateKey& key, bool pinned);

  // Every stored manifest (for rebuilding indexes at open); stops at the first error.
  absl::Status ForEachManifest(const std::function<void(Manifest)>& fn);
  absl::StatusOr<std::vector<StateKey>> LoadPins();

  // RocksDB's own accounting: SST bytes on disk, live WAL bytes, memtable bytes.
  struct Sizes {
    uint64_t sst_bytes = 0;
    uint64_t wal_bytes = 0;
    uint64_t memtable_bytes = 0;
    uint64_t pending_compaction_bytes = 0;  // RocksDB's estimate, all column families
    uint64_t background_jobs = 0;           // flushes + compactions running now
  };
  Sizes GetSizes();

  // Flushes memtables to SST files (tests, benchmarks).
  absl::Status Flush();

 private:
  PageStore() = default;
  void AddDeletes(rocksdb::WriteBatch& batch, const Manifest& m);

  absl::Status Write(rocksdb::WriteBatch& batch, std::string_view what, uint64_t incoming);

  std::string path_;            // Constant after Open.
  bool guard_space_ = false;    // Constant after Open.
  uint64_t reserve_bytes_ = 0;  // Constant after Open.
  absl::Mutex failed_mu_;
  absl::Status failed_ ABSL_GUARDED_BY(failed_mu_);  // first write error, sticky
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;  // owned; destroyed before db_
  rocksdb::ColumnFamilyHandle* pages_ = nullptr;       // Constant after Open.
  rocksdb::ColumnFamilyHandle* manifests_ = nullptr;
  rocksdb::ColumnFamilyHandle* meta_ = nullptr;
  rocksdb::WriteOptions write_options_;
};

// RocksDB status → absl::Status, prefixed with `what`.
absl::Status FromRocks(const rocksdb::Status& s, std::string_view what);

// Key of a page in the pages column family.
std::string PageKey(const StateKey& state, uint32_t layer, uint32_t kv_head, uint32_t index);

}  // namespace glimpse::cache_node
