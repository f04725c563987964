// Replicator: keeps each state this cache node stores on its owners, the `replicas` (R) peers
// that rank highest for its key (core/cache_client/placement.h) among those that answer, the
// same placement the workers' clients use over the same address list (`peers`, this node's entry
// `self`; SetPeers replaces it when the live cache nodes change, core/cluster/etcd_membership.h,
// and starts a scan at once). Every `interval` it scans the states it stores and, for each:
//   - copies it to every owner that lacks it (repair, after a node died: the survivors copy to the
//     new owners until R copies exist again; rebalance, after a node joined or came back: it
//     gets the states it now owns);
//   - drops its own copy once it is not an owner and every owner has the state (a copy a client
//     made on a substitute while an owner was down, or one a joining node now owns). Pinned
//     states are kept;
//   - deletes its own copy when an owner deleted the state on request after the copy was made
//     (its tombstone, cache_node_service.h): a node that was down during a delete does not bring
//     the state back.
// A peer that fails a call is passed over for the rest of the scan (owners are the next in the
// ranking). Copies go at most `bytes_per_second`; a copy is a put with `copy` set (no tokens; a
// node takes it only from role cache). A scan holds no state between runs, so a restart resumes
// where the stores are. A scan holds every stored manifest in memory and makes one Has call per
// state and other owner. A scan while this node is not among the peers (it has not seen its own
// announcement yet) does nothing: it cannot know which copies are its own to keep. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cache-node/cache_node_service.h"
#include "core/cache_client/cache_client.h"

namespace glimpse::cache_node {

struct ReplicatorOptions {
  // Every cache node's gRPC host:port, as workers list them; empty: none until SetPeers.
  std::vector<std::string> peers;
  std::string self;  // this node's entry in `peers`
  int replicas = 2;  // capped at the number of peers
  absl::Duration interval = absl::Seconds(30);
  // A peer away (gone from the live list, or failing calls) for less than this is still an owner:
  // its states get no stand-in copies, and no copy is dropped on its account, so a node that
  // restarts (a rolling update) comes back to its share instead of having it moved away and back.
  // Those states count as under-replicated meanwhile. Zero: replaced at once.
  absl::Duration repair_delay = absl::ZeroDuration();
  int64_t bytes_per_second = int64_t{64} << 20;
  TlsFiles tls;  // to reach the peers (this node's client certificate)
  absl::Duration timeout = absl::Seconds(30);
};

struct ReplicatorStats {
  int64_t scans = 0;
  int64_t copied_states = 0, copied_bytes = 0, dropped_states = 0, deleted_states = 0;
  int64_t under_replicated = 0;  // at the end of the last scan: states with fewer than R copies
};

class Replicator {
 public:
  // `transport`: this node's client engine to its peers (registered with the coordinator, so
  // peers accept its batches).
  static absl::StatusOr<std::unique_ptr<Replicator>> Start(
      ReplicatorOptions options, CacheNodeService* service,
      std::unique_ptr<transport::Transport> transport);
  ~Replicator();  // stops after the state in hand

  // The peers from now on (InvalidArgument, and none changed, for an address that cannot be
  // dialled); a scan starts at once when they changed.
  absl::Status SetPeers(const std::vector<std::string>& peers);
  ReplicatorStats stats() const;

 private:
  Replicator(ReplicatorOptions options, CacheNodeService* service,
             std::unique_ptr<cache_client::CacheClient> client);
  void Loop();
  absl::Status Scan();
  // The peers of one scan: the live ones and those away for less than repair_delay.
  struct ScanPeers {
    std::vector<std::string> addresses;
    std::vector<bool> down;     // failed this scan, away for repair_delay or more: replaced
    std::vector<bool> waiting;  // away for less than repair_delay: owners not asked
  };
  ScanPeers PeersForScan();
  // Acts on one stored state, placed over the scan's peers (this node among them).
  void Place(const kvstate::Manifest& m, ScanPeers& peers, int64_t& under);
  // How long `peer` has been away (zero when it is newly so); Back when it answered.
  absl::Duration Away(const std::string& peer);
  void Back(const std::string& peer);
  // Copies the state to `peer`; the bytes sent, or why not.
  absl::StatusOr<int64_t> CopyTo(const std::string& peer, const kvstate::StateKey& key);
  // Waits `d`, until stopping or a rescan is asked for; false once stopping.
  bool Sleep(absl::Duration d, bool wake_for_rescan = false);

  const ReplicatorOptions options_;
  CacheNodeService* const service_;
  const std::unique_ptr<cache_client::CacheClient> client_;  // its nodes are the peers
  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // signalled when stopping_ or rescan_ is set
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool rescan_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, absl::Time> away_since_ ABSL_GUARDED_BY(mu_);  // by peer address
  ReplicatorStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace glimpse::cache_node
