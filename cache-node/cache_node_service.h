// CacheNodeService: the cache node's logic (no RPC headers), in the shape of Mooncake's
// MasterService: the gRPC adapter (cache_node_grpc.h) translates messages and calls it; tests
// construct it directly with a loopback transport and a fake clock.
//
// Put, two phases. BeginPut(manifest, tokens) validates the manifest (kvstate/manifest.h), checks
// that the tokens hash to its state key, refuses a different payload under a stored key
// (AlreadyExists), and returns a ticket and this node's transport address. A ticket is 64 random
// bits (OpenSSL's RAND_bytes: not guessable from another's) bound to the sender address BeginPut
// named, so a batch for it from any other engine is dropped. The client ships the
// pages as one transport batch: buffer 0 a BatchHeader{kPut, ticket, n}
// (kvstate/transfer_header.h), then the pages in manifest order (packed in one buffer, or one
// buffer per page). A receive thread parks batches by ticket. CommitPut(ticket) waits for the
// batch, verifies every page (full DecodePage, CRC32C, model, state key, shape and positions
// against the manifest), applies retention (state_index.h) and writes pages, manifest and displaced
// states in one RocksDB WriteBatch (page_store.h). It returns OK only once RocksDB accepted the
// batch with the configured durability; a duplicate put of an identical payload is OK
// (already_stored), of a different one AlreadyExists; nothing is stored on any error. Unclaimed
// tickets expire after Options::ticket_timeout, and CommitPut waits at most that long for the
// pages whatever its caller's deadline, so slow or absent senders hold a ticket for a bounded
// time.
//
// Get(key, expected model, pages, reply address): reads the state from the warm tier or under one
// RocksDB snapshot, ships the selected pages to the reply address as one batch
// {kGetReply, request id, n, packed} + one buffer holding the pages back to back (a whole warm
// state ships from the warm tier's memory uncopied; a state read from RocksDB is packed once, and
// that copy is what the warm tier then keeps), waits for the transfer to complete and returns the
// manifest restricted to the shipped pages, in batch order. NotFound for an unknown state,
// FailedPrecondition naming both fingerprints for another model, InvalidArgument for a page not in
// the state, DataLoss for a page missing from RocksDB or of the wrong size. Page CRC32Cs are not
// recomputed on a Get: bytes enter only through a put that verified every page (full
// DecodePage), RocksDB verifies its own block checksums on every read from a file, and the client
// (cache_client.h) verifies every page's CRC32C end to end. For the same reason neither direction
// asks the transport for a batch CRC32C (SubmitOptions::checksum): it would hash every byte again
// on both sides.
//
// GetMany(items, reply address): every item as a Get, all shipped in ONE transport batch
// {kGetReply, request id, total pages, packed} + one buffer per item (the item's pages back to
// back), in request order: one RPC and one transfer for many states. All or nothing: the first
// item that fails fails the request with its status (the message names the item) and nothing is
// shipped; InvalidArgument for no items, more than kMaxGetItems, or more page bytes in all than
// limits.max_state_bytes (checked from the manifests before any page is read).
//
// Lookup(namespace, tokens): the longest stored prefix (state_index.h). Pin / Unpin: a pinned
// state is never dropped by retention nor evicted from the warm tier; Delete refuses a pinned
// state (FailedPrecondition). With replication (tombstone_ttl > 0), Delete leaves a tombstone for
// tombstone_ttl, whether or not the node held the state (NotFound still when it did not): Holds
// reports its time, and a replication copy of the state stored before it (copies keep the created
// time the state got where a client stored it) is refused (FailedPrecondition), at BeginPut and
// again at commit, so a node that was down during the delete cannot have its old copy restored
// (cache-node/replicator.h); storing the state again (a put, or a copy stored after the delete)
// clears it. FollowDelete deletes a copy stored before an owner's tombstone, tombstoned at the
// owner's time; DropCopy removes a copy replication no longer needs, with none. Every method is
// thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cache-node/page_store.h"
#include "cache-node/state_index.h"
#include "cache-node/warm_tier.h"
#include "core/common/clock.h"
#include "core/kvstate/manifest.h"
#include "core/transport/peer_allowlist.h"
#include "core/transport/transport.h"

namespace glimpse::cache_node {

struct CacheNodeOptions {
  PageStoreOptions storage;
  size_t warm_bytes = size_t{1} << 30;
  absl::Duration warm_half_life = absl::Seconds(60);
  RetentionLimits retention;
  absl::Duration retention_sweep_interval = absl::Seconds(10);  // zero: no background sweep
  kvstate::ManifestLimits limits;
  size_t max_tokens = size_t{1} << 22;                // per BeginPut / Lookup
  absl::Duration ticket_timeout = absl::Seconds(30);  // BeginPut → pages → CommitPut
  // The peers the node's transport is restricted to (transport/peer_allowlist.h), checked again
  // at BeginPut for a clear error; null: any peer.
  std::shared_ptr<transport::PeerAllowlist> peers;
  absl::Duration transfer_timeout = absl::Seconds(30);  // shipping a Get reply
  size_t max_pending_puts = 4096;
  // Pinned page bytes per namespace (a tenant's states under one model and policy) at most; a
  // Pin past it is ResourceExhausted, so no caller can pin retention away from the others.
  // Zero: no limit.
  uint64_t max_pinned_bytes_per_namespace = uint64_t{1} << 30;
  // How long a deleted state's tombstone is kept (longer than any node stays down and comes back
  // with its old copies); dropped by the retention sweep. Zero: no tombstones (no replication).
  absl::Duration tombstone_ttl = absl::ZeroDuration();
};

struct PutTicket {
  uint64_t ticket = 0;
  std::string transport_address;  // where to ship the pages
};

struct CommitResult {
  bool already_stored = false;  // an identical payload was stored before; nothing changed
  int64_t created_unix_micros = 0;
};

using kvstate::PageId;

struct GetRequest {
  StateKey key{};
  NamespaceKey ns{};  // the state's namespace: another namespace's state is NotFound
  kvstate::Fingerprint expected_model{};
  std::vector<PageId> pages;  // empty: all pages
  std::string reply_address;  // the client's transport address
  uint64_t request_id = 0;    // echoed in the reply batch header
};

struct GetResult {
  kvstate::Manifest manifest;  // pages = the shipped ones, in batch order
  bool warm_hit = false;
};

// One state of a batched get.
struct GetItem {
  StateKey key{};
  NamespaceKey ns{};
  kvstate::Fingerprint expected_model{};
  std::vector<PageId> pages;  // empty: all pages
};

inline constexpr size_t kMaxGetItems = 1024;

struct GetManyRequest {
  std::vector<GetItem> items;  // 1..kMaxGetItems; a key may repeat
  std::string reply_address;   // the client's transport address
  uint64_t request_id = 0;     // echoed in the reply batch header
};

struct LookupResult {
  bool found = false;
  StateKey key{};
  uint32_t token_count = 0;
  uint64_t bytes = 0;
  bool pinned = false;
  bool warm = false;
};

enum class Method { kBeginPut, kCommitPut, kGet, kGetMany, kLookup, kPin, kUnpin, kDelete, kCount };
const char* MethodName(Method m);

struct CacheNodeStats {
  uint64_t states = 0, stored_bytes = 0, pinned_states = 0, pinned_bytes = 0;
  WarmTier::Stats warm;
  uint64_t warm_budget_bytes = 0;
  PageStore::Sizes storage;
  uint64_t puts = 0, duplicate_puts = 0, gets = 0, lookups = 0, lookup_hits = 0, deletes = 0;
  uint64_t bytes_put = 0, bytes_got = 0, retention_deleted = 0;
  uint64_t pending_puts = 0, dropped_batches = 0;
  // absl::StatusCode's values are 0..16.
  static constexpr size_t kStatusCodes = 17;
  // errors[method][absl::StatusCode] = count
  std::array<std::array<uint64_t, kStatusCodes>, static_cast<size_t>(Method::kCount)> errors{};
  transport::Metrics transport;
};

class CacheNodeService {
 public:
  // Opens the store, rebuilds the index from it and starts the receive (and retention) threads.
  // `clock` is not owned and must outlive the service.
  static absl::StatusOr<std::unique_ptr<CacheNodeService>> Create(
      const CacheNodeOptions& options, std::unique_ptr<transport::Transport> transport,
      Clock* clock);
  ~CacheNodeService();  // Stop()
  // Stops the threads and closes the store; further calls fail with Unavailable. Idempotent.
  void Stop();

  // `sender_address`: the client engine's transport address (checked against options.peers).
  // `copy`: another cache node copies a state it stores (replication): no tokens to check the
  // key against; the adapter lets only role cache ask it.
  absl::StatusOr<PutTicket> BeginPut(kvstate::Manifest manifest, std::span<const int32_t> tokens,
                                     std::string_view sender_address = {}, bool copy = false);
  absl::StatusOr<CommitResult> CommitPut(uint64_t ticket, absl::Time deadline);
  absl::StatusOr<GetResult> Get(const GetRequest& request, absl::Time deadline);
  // Results in request order.
  absl::StatusOr<std::vector<GetResult>> GetMany(const GetManyRequest& request,
                                                 absl::Time deadline);
  absl::StatusOr<LookupResult> Lookup(const NamespaceKey& ns, std::span<const int32_t> tokens);
  // A state is named by its key and its namespace; another namespace's state is NotFound, with
  // the message of an unknown key.
  absl::Status Pin(const NamespaceKey& ns, const StateKey& key);
  absl::Status Unpin(const NamespaceKey& ns, const StateKey& key);
  absl::Status Delete(const NamespaceKey& ns, const StateKey& key);
  absl::Status DropCopy(const NamespaceKey& ns, const StateKey& key);
  // Deletes the state if it is still the copy created at `created_unix_micros`, with a tombstone
  // of `deleted` (an owner's); FailedPrecondition when it was stored again since.
  absl::Status FollowDelete(const NamespaceKey& ns, const StateKey& key,
                            int64_t created_unix_micros, absl::Time deleted);
  // Whether the state is stored (in `ns`), or was deleted here (its tombstone; any namespace: the
  // key is a hash of the namespace too).
  kvstate::Held Holds(const NamespaceKey& ns, const StateKey& key) const;
  // Every stored state's manifest, for replication's scan (read from the store, outside the
  // service's locks).
  absl::Status ForEachManifest(const std::function<void(kvstate::Manifest)>& fn);
  // A stored state's manifest and page bytes, for replication's copies.
  absl::StatusOr<std::pair<kvstate::Manifest, std::vector<std::string>>> ReadState(
      const StateKey& key);
  CacheNodeStats Stats();
  // One retention pass (age limit); the background thread runs it every sweep interval.
  absl::Status RunRetention();

  std::string transport_address() const { return transport_->LocalAddress(); }
  // The peers the node deals with (options.peers; null: any).
  transport::PeerAllowlist* peers() const { return options_.peers.get(); }

 private:
  struct Pending {
    kvstate::Manifest manifest;
    std::string sender;  // the transport address BeginPut named; "" accepts any
    absl::Time created;
    bool copy = false;  // replication's: keeps the manifest's created time
    bool claimed = false;
    std::optional<absl::StatusOr<transport::ReceivedBatch>> batch;
  };

  CacheNodeService(const CacheNodeOptions& options, std::unique_ptr<transport::Transport> t,
                   Clock* clock);
  absl::Status Load();
  // Whether the state under `key` is pinned; NotFound naming the key when none is stored.
  absl::StatusOr<bool> PinnedIfStored(const NamespaceKey& ns, const StateKey& key) const;
  // ResourceExhausted when pinning `key` would take its namespace past
  // max_pinned_bytes_per_namespace (OK for an unknown or pinned state).
  absl::Status WithinPinQuota(const StateKey& key) const;
  void ReceiveLoop();
  void RetentionLoop();
  // The ticket's batch; its manifest and whether it is a copy into `manifest` and `copy`.
  absl::StatusOr<transport::ReceivedBatch> AwaitBatch(uint64_t ticket, absl::Time deadline,
                                                      kvstate::Manifest* manifest, bool* copy);
  absl::StatusOr<CommitResult> CommitVerified(const kvstate::Manifest& m,
                                              std::span<const std::span<const uint8_t>> pages);
  absl::StatusOr<CommitResult> CheckDuplicate(const kvstate::Manifest& m,
                                              std::span<const std::span<const uint8_t>> pages);
  absl::StatusOr<std::shared_ptr<const WarmState>> LoadWarm(const StateKey& key);
  struct Served;  // one item of a get, ready to ship (cache_node_read.cc)
  // Reads `item` from the warm tier or RocksDB and charges its page bytes to `*budget`
  // (InvalidArgument, before any page is read, when they exceed it).
  absl::StatusOr<Served> Serve(const GetItem& item, uint64_t* budget);
  absl::StatusOr<Served> ServeCold(const GetItem& item, uint64_t* budget);
  absl::StatusOr<std::vector<GetResult>> GetItems(std::span<const GetItem> items,
                                                  const std::string& reply_address,
                                                  uint64_t request_id, absl::Time deadline);
  // Admits `w` to the warm tier if it is still the stored version of its state (pinned if the
  // state is pinned).
  void AdmitIfCurrent(std::shared_ptr<const WarmState> w);
  // Ships [header, buffers...] to `address` and waits for the transfer: `buffers` is one packed
  // buffer of `page_count` pages, or (packed = false) one buffer per page.
  absl::Status Ship(const std::string& address, uint64_t request_id, uint32_t page_count,
                    std::span<const std::span<const uint8_t>> buffers, bool packed,
                    absl::Time deadline);
  void DeleteFromIndexes(const std::vector<kvstate::Manifest>& states);
  // Drops the tombstones older than tombstone_ttl (under admin_mu_).
  absl::Status DropExpiredTombstones();
  // Delete, DropCopy and FollowDelete: removes the state (only the copy created at `created`,
  // when given) and leaves `tombstone`, if any.
  absl::Status Remove(const NamespaceKey& ns, const StateKey& key,
                      std::optional<absl::Time> tombstone, std::optional<int64_t> created);
  absl::StatusOr<CommitResult> VerifyAndCommit(uint64_t ticket, absl::Time deadline);
  void Record(Method m, const absl::Status& s);

  const CacheNodeOptions options_;  // Constant after construction.
  const std::unique_ptr<transport::Transport> transport_;
  Clock* const clock_;
  std::unique_ptr<PageStore> store_;  // Constant after Load, until Stop.
  WarmTier warm_;

  mutable absl::Mutex mu_;  // shared (ReaderLock) for reads of the index
  StateIndex index_ ABSL_GUARDED_BY(mu_);
  std::set<StateKey> committing_ ABSL_GUARDED_BY(mu_);              // puts between plan and write
  std::map<StateKey, absl::Time> tombstones_ ABSL_GUARDED_BY(mu_);  // deleted here, and when
  uint64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Serialises Pin, Unpin, Delete and retention deletes; guards no member (the index is mu_'s).
  absl::Mutex admin_mu_;

  absl::Mutex pending_mu_;
  absl::CondVar pending_cv_;  // a batch arrived, or the node is stopping
  std::map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(pending_mu_);

  absl::Mutex peers_mu_;
  std::map<std::string, transport::PeerId> peers_ ABSL_GUARDED_BY(peers_mu_);
  std::atomic<uint64_t> next_request_{1};

  // Public calls in flight; Stop() waits for none before it closes the store.
  class Call {
   public:
    explicit Call(CacheNodeService* s);
    ~Call();
    bool ok() const { return ok_; }

   private:
    CacheNodeService* const s_;
    bool ok_;
  };
  absl::Mutex active_mu_;
  absl::CondVar active_cv_;  // active_ dropped to zero
  int active_ ABSL_GUARDED_BY(active_mu_) = 0;

  std::atomic<bool> stopping_{false};  // set under active_mu_
  absl::Mutex stop_mu_;    // pairs stop_cv_ with stopping_ (an atomic), so no wake-up is lost
  absl::CondVar stop_cv_;  // the node is stopping
  std::thread receiver_;
  std::thread retention_;

  std::atomic<uint64_t> puts_{0}, duplicate_puts_{0}, gets_{0}, lookups_{0}, lookup_hits_{0},
      deletes_{0}, bytes_put_{0}, bytes_got_{0}, retention_deleted_{0}, dropped_batches_{0};
  std::array<std::array<std::atomic<uint64_t>, CacheNodeStats::kStatusCodes>,
             static_cast<size_t>(Method::kCount)>
      errors_{};
};

}  // namespace glimpse::cache_node
