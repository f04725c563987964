// CacheClient: what prefill and decode workers use to talk to a cache node
// (proto/glimpse/v1/cache_node.proto; cache-node/cache_node_service.h for the semantics).
// gRPC carries control and the manifest; page bytes travel over the client's Transport.
//
//   Put(manifest, tokens, pages)  BeginPut → one transport batch [header, pages...] → CommitPut.
//                                 Returns once the node has the state durably (or it was already
//                                 stored with the identical payload).
//   Get(key, model, pages)        the node ships the pages to this client's transport address; the
//                                 returned State owns them (batch storage) and lists them in
//                                 manifest order. Every page's CRC32C is verified here (end to end;
//                                 the node does not recompute them): a page or checksum error is
//                                 DataLoss, never silent.
//   GetMany(states)               several Gets in one RPC and one transfer (all or nothing); the
//                                 States share the batch's storage. Saves a gRPC round trip and a
//                                 transfer per extra state (bench/RESULTS.md "Cache node").
//   Lookup(namespace, tokens)     the longest stored prefix.
//   Pin / Unpin / Delete / Stats.
// Errors are the node's gRPC status as absl::Status (code and message kept), or the transport's.
//
// The client owns its Transports (one or more) and runs one thread per transport that receives
// Get replies on it, so no transport may be shared with another receiver. Each Get or Put goes
// through the transport with the fewest calls in flight (the first of those on a tie). Why more
// than one: the receiver's side moves the bytes (over shared memory its UCX worker copies them
// with CMA; over TCP it reads and reassembles them) and a worker is one thread, so concurrent Gets
// through one transport queue behind each other's copies while other cores idle; N transports let
// N Gets copy at once (docs/cache_node.md). All methods are thread-safe; concurrent Gets are
// matched to their replies by request id. Every call has a deadline (Options::timeout).
//
// Several cache nodes (Options::addresses): each state is kept on R of them (Options::replicas),
// the R that rank highest for its key by rendezvous hashing (placement.h), so every client
// computes the same placement from the same node list and a node's going or coming moves only the
// states it ranks for (the nodes' replicators copy and drop accordingly, cache-node/replicator.h).
// A node that failed a call (UNAVAILABLE, DEADLINE_EXCEEDED)
// is tried last for kSuspectFor. Put stores on the R highest-ranked nodes at once; a replica that
// fails is replaced by the next node in the ranking, and the put succeeds once W
// (Options::write_quorum, default R) have the state durably (a smaller W acknowledges a state that
// fewer nodes hold: losing those loses it). Get tries the nodes in ranking order and moves on past
// one that lacks the state, failed, or sent a page that fails its checksum. GetMany sends each node
// one batch of the states it ranks first for, all nodes at once, and gets the states of a batch
// that failed one by one as Get does; Lookup asks every node and keeps the longest prefix; Pin,
// Unpin and Delete act on every node that answers and holds the state (a node down is passed
// over; with the nodes' replicators on, its copy of a state deleted meanwhile is deleted once it
// is back, cache-node/replicator.h). Stats is the first
// node's. One address: exactly the single-node client.
//
// The node list may change while calls run (SetNodes: the live cache nodes a membership watch
// follows, core/cluster/etcd_membership.h); each call uses the list as it was when it began.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/common/grpc/server.h"
#include "core/kvstate/manifest.h"
#include "core/transport/transport.h"
#include "glimpse/v1/cache_node.grpc.pb.h"

namespace glimpse::cache_client {

struct CacheClientOptions {
  std::vector<std::string> addresses;  // the nodes' gRPC host:port; empty: none until SetNodes
  TlsFiles tls;                        // ca_file set: TLS (cert_file too: mutual TLS)
  absl::Duration timeout = absl::Seconds(30);
  int replicas = 2;  // R: copies of each state (capped at the number of nodes)
  // W: replicas that must have a put before it succeeds; 0: R. Capped at the most nodes the
  // client ever listed (not at those alive now: a put fails while fewer than W are alive).
  int write_quorum = 0;
};

struct PutResult {
  bool already_stored = false;
  int64_t created_unix_micros = 0;
};

struct State {
  kvstate::Manifest manifest;                   // pages = the fetched ones, in order
  std::vector<std::span<const uint8_t>> pages;  // pages[i] is manifest.pages[i]; owned by batch
  std::shared_ptr<const transport::ReceivedBatch> batch;  // shared by the States of one GetMany
  bool warm_hit = false;
};

// One state of a GetMany.
struct GetSpec {
  kvstate::NamespaceKey ns{};  // the state's namespace
  kvstate::StateKey key{};
  kvstate::Fingerprint model{};        // the model the caller expects the state to be made by
  std::vector<kvstate::PageId> pages;  // empty: every page
};

struct LookupMatch {
  bool found = false;
  kvstate::StateKey key{};
  uint32_t token_count = 0;
  uint64_t bytes = 0;
  bool pinned = false;
  bool warm = false;
};

class CacheClient {
 public:
  // At least one transport; each gets its own receive thread.
  static absl::StatusOr<std::unique_ptr<CacheClient>> Create(
      const CacheClientOptions& options,
      std::vector<std::unique_ptr<transport::Transport>> transports);
  ~CacheClient();

  absl::StatusOr<PutResult> Put(const kvstate::Manifest& manifest, std::span<const int32_t> tokens,
                                std::span<const std::span<const uint8_t>> pages);
  // A cache node's copy of a state it stores (replication, cache-node/replicator.h): no tokens;
  // nodes take it only from a caller of role cache.
  // The copy goes to `node` (one of the node list's addresses; NOT_FOUND for another).
  absl::StatusOr<PutResult> PutCopy(const std::string& node, const kvstate::Manifest& manifest,
                                    std::span<const std::span<const uint8_t>> pages);
  // What `node` (one of the list's) holds of the state.
  absl::StatusOr<kvstate::Held> Holds(const std::string& node, const kvstate::NamespaceKey& ns,
                                      const kvstate::StateKey& key);

  // Replaces the node list (empty: every call fails UNAVAILABLE until nodes are set); a node
  // kept keeps its channel. InvalidArgument (and the list unchanged) when an address cannot be
  // dialled.
  absl::Status SetNodes(const std::vector<std::string>& addresses);
  std::vector<std::string> nodes() const;
  // A state is named by its namespace and its key (the node answers NotFound for a state of
  // another namespace, as for an unknown key).
  absl::StatusOr<State> Get(const kvstate::NamespaceKey& ns, const kvstate::StateKey& key,
                            const kvstate::Fingerprint& model,
                            const std::vector<kvstate::PageId>& pages = {});
  // Results in the order of `states` (1 to 1024 of them; a state may repeat).
  absl::StatusOr<std::vector<State>> GetMany(std::span<const GetSpec> states);
  absl::StatusOr<LookupMatch> Lookup(const kvstate::NamespaceKey& ns,
                                     std::span<const int32_t> tokens);
  absl::Status Pin(const kvstate::NamespaceKey& ns, const kvstate::StateKey& key);
  absl::Status Unpin(const kvstate::NamespaceKey& ns, const kvstate::StateKey& key);
  absl::Status Delete(const kvstate::NamespaceKey& ns, const kvstate::StateKey& key);
  absl::StatusOr<v1::CacheStatsResponse> Stats();

  // Each transport's counters, in the order given to Create.
  std::vector<transport::Metrics> TransportMetrics() const;

 private:
  // One transport, its peers and its receive thread. Its count of calls in flight is
  // lane_calls_[index] (a member of a nested struct cannot be ABSL_GUARDED_BY the client's mutex).
  struct Lane {
    Lane(size_t i, std::unique_ptr<transport::Transport> t)
        : index(i), transport(std::move(t)), peers(*transport) {}
    const size_t index;  // in lanes_
    const std::unique_ptr<transport::Transport> transport;
    transport::PeerMap peers;
    std::thread receiver;
  };

  struct Node {
    std::string address;
    std::shared_ptr<v1::CacheNode::Stub> stub;  // shared with the lists that keep the node
  };
  // The node list as one call sees it; replaced whole by SetNodes.
  struct Nodes {
    std::vector<std::string> addresses;
    std::vector<Node> nodes;  // nodes[i] is addresses[i]
    size_t most = 0;          // the most nodes any list of this client held
  };
  static constexpr absl::Duration kSuspectFor = absl::Seconds(2);

  explicit CacheClient(const CacheClientOptions& options);
  // The node list now; UNAVAILABLE while it is empty.
  absl::StatusOr<std::shared_ptr<const Nodes>> Snapshot() const;
  // The nodes in the order to try for `key`: rendezvous rank, suspects last.
  std::vector<const Node*> Placement(const Nodes& nodes, const kvstate::StateKey& key) const;
  // `address`'s node in the list; NOT_FOUND when it is not one.
  static absl::StatusOr<const Node*> Find(const Nodes& nodes, const std::string& address);
  // Marks `node` suspect when `failure` says it is down or slow; true when it did.
  bool Suspect(const Node& node, const absl::Status& failure);
  // The pages back to back, as a put ships them (made once for every replica).
  static std::vector<uint8_t> Pack(std::span<const std::span<const uint8_t>> pages);
  // `packed`: Pack of the manifest's pages.
  absl::StatusOr<PutResult> PutOn(const Node& node, const kvstate::Manifest& manifest,
                                  std::span<const int32_t> tokens, std::span<const uint8_t> packed,
                                  bool copy);
  absl::StatusOr<State> GetOn(const Node& node, const kvstate::NamespaceKey& ns,
                              const kvstate::StateKey& key, const kvstate::Fingerprint& model,
                              const std::vector<kvstate::PageId>& pages);
  absl::StatusOr<std::vector<State>> GetManyOn(const Node& node, std::span<const GetSpec> states);
  absl::StatusOr<LookupMatch> LookupOn(const Node& node, const kvstate::NamespaceKey& ns,
                                       std::span<const int32_t> tokens);
  void ReceiveLoop(Lane* lane);
  // The lane with the fewest calls in flight, counted as used until ReleaseLane.
  Lane& AcquireLane();
  void ReleaseLane(Lane& lane);
  absl::StatusOr<transport::ReceivedBatch> AwaitReply(uint64_t id, absl::Time deadline);
  uint64_t NewRequest();          // a request id whose reply batch the receive thread keeps
  void DropRequest(uint64_t id);  // after a failed RPC
  // Awaits request `id`'s batch and splits it into one State per response (in order), verifying
  // every page.
  absl::StatusOr<std::vector<State>> FinishGet(
      uint64_t id, absl::Time deadline, std::span<const v1::CacheGetResponse* const> responses);
  using KeyMethod = grpc::Status (v1::CacheNode::Stub::*)(grpc::ClientContext*,
                                                          const v1::CacheStateKeyRequest&,
                                                          v1::CacheEmpty*);
  // `method` on every node: OK when one did it and none failed otherwise than NOT_FOUND or, with
  // `down_ok`, than being down; NOT_FOUND when no node answering holds the state.
  absl::Status KeyCall(KeyMethod method, const kvstate::NamespaceKey& ns,
                       const kvstate::StateKey& key, bool down_ok);
  void SetDeadline(grpc::ClientContext* ctx) const;

  const CacheClientOptions options_;  // Constant after construction (addresses: the first list).
  std::vector<std::unique_ptr<Lane>> lanes_;  // fixed after Create

  absl::Mutex replies_mu_;
  absl::CondVar replies_cv_;  // signalled when a reply arrives and when stopping
  // lane_calls_[i]: Gets and Puts in flight on lanes_[i]; sized with lanes_ in Create.
  std::vector<int> lane_calls_ ABSL_GUARDED_BY(replies_mu_);
  std::set<uint64_t> awaited_ ABSL_GUARDED_BY(replies_mu_);
  std::map<uint64_t, absl::StatusOr<transport::ReceivedBatch>> replies_
      ABSL_GUARDED_BY(replies_mu_);
  uint64_t next_request_ ABSL_GUARDED_BY(replies_mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(replies_mu_) = false;

  mutable absl::Mutex nodes_mu_;
  std::shared_ptr<const Nodes> nodes_ ABSL_GUARDED_BY(nodes_mu_);

  mutable absl::Mutex suspects_mu_;
  std::map<std::string, absl::Time> suspect_until_ ABSL_GUARDED_BY(suspects_mu_);  // by address
};

}  // namespace glimpse::cache_client
