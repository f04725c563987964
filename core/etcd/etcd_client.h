// EtcdClient: the etcd v3 calls Glimpse's control plane makes (Range, Put, DeleteRange, Txn,
// leases and watches over etcd's gRPC API, etcdserverpb/rpc.proto) against a cluster named by
// its members' client endpoints.
//
// Keys may be attached to a lease: etcd deletes them when the lease expires (its holder stopped
// renewing it for its TTL) or is revoked, which is how a holder's death shows (election.h).
//
// A call goes to the endpoint that answered last; one that is UNAVAILABLE or past the call's
// timeout there is tried on the next endpoint, each at most once per call, so a dead member costs
// a caller one timeout and later calls none. What Put and Delete acknowledge a majority of the
// cluster has committed to its log (etcd's raft), so it survives any minority of members dying.
// Reads are linearizable (a quorum read), so a client never reads older data than it wrote.
//
// Errors: UNAVAILABLE naming every endpoint tried and the last error when none answers (the call
// may or may not have taken effect: Put and Delete are idempotent, a caller retries); etcd's own
// refusals keep their code and message (RESOURCE_EXHAUSTED when its space quota is full,
// INVALID_ARGUMENT for an empty key). Thread-safe.
#pragma once

#include <grpcpp/client_context.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/common/grpc/server.h"

namespace glimpse::etcd {

struct EtcdOptions {
  std::vector<std::string> endpoints;         // host:port of members' client URLs; at least one
  absl::Duration timeout = absl::Seconds(5);  // per attempt on one endpoint
  TlsFiles tls;                               // empty: plaintext (etcd's http:// client URLs)
  int64_t page_keys = 512;                    // keys per Range reply of GetPrefix
};

using KeyValues = std::vector<std::pair<std::string, std::string>>;

class EtcdClient {
 public:
  // InvalidArgument without endpoints or with a bad TLS file; connects lazily.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(const EtcdOptions& options);
  ~EtcdClient();

  // With a lease (not 0), the key goes when the lease ends.
  absl::Status Put(std::string_view key, std::string_view value, int64_t lease = 0);
  absl::Status Delete(std::string_view key);  // OK when there was no such key
  // Puts (a value) and deletes (nullopt) in one transaction, all or none, in one round trip. At
  // most kMaxTxnOps operations of distinct keys (etcd's limits: --max-txn-ops 128, and no key
  // twice in one transaction); InvalidArgument otherwise.
  using Write = std::pair<std::string, std::optional<std::string>>;
  // With a guard, only if `guard.key` exists and was created at `guard.create_revision` (it was
  // not deleted and put again since): FAILED_PRECONDITION, and nothing written, otherwise.
  struct Guard {
    std::string key;
    int64_t create_revision = 0;
  };
  absl::Status Apply(const std::vector<Write>& writes, const std::optional<Guard>& guard = {});
  static constexpr size_t kMaxTxnOps = 128;

  // A key's value, the revision that created it and the lease it is attached to (0: none).
  struct Versioned {
    std::string value;
    int64_t create_revision = 0;
    int64_t lease = 0;
  };
  absl::StatusOr<std::optional<Versioned>> Get(std::string_view key);  // nullopt: no such key
  // Puts `value` under `key`, attached to `lease`, unless the key exists; either way in one
  // transaction returns what the key holds afterwards (theirs, or this with lease == `lease`).
  absl::StatusOr<Versioned> PutIfAbsent(std::string_view key, std::string_view value,
                                        int64_t lease);

  // A new lease of `ttl` (whole seconds, at least 1; etcd raises it to its minimum if lower).
  struct Lease {
    int64_t id = 0;
    absl::Duration ttl;
  };
  absl::StatusOr<Lease> GrantLease(absl::Duration ttl);
  // Renews the lease for its whole TTL and returns the TTL left; NOT_FOUND once it expired.
  absl::StatusOr<absl::Duration> KeepAlive(int64_t lease);
  absl::Status RevokeLease(int64_t lease);  // deletes its keys; OK when it is already gone
  // Every key beginning with `prefix` (not empty) and its value, in key order, as of one
  // revision; read in pages of options.page_keys keys, fewer where a page of large values would
  // pass gRPC's 4 MiB message limit, so that any number of keys of any size can be read.
  // `revision` (when not null): the revision read, from which a Watch goes on.
  absl::StatusOr<KeyValues> GetPrefix(std::string_view prefix, int64_t* revision = nullptr);

  // One change of a watched key: its new value, or nullopt when it was deleted (a lease ended).
  struct Change {
    std::string key;
    std::optional<std::string> value;
  };
  using OnChanges = std::function<void(const std::vector<Change>&)>;
  // Streams every change of the keys under `prefix` from `start_revision` on, in revision order,
  // to `on_changes` (called on this thread, a revision's changes at a time), from the endpoint
  // that answered last, until the stream ends: `ctx.TryCancel()` from another thread ends it
  // (CANCELLED). Never OK: UNAVAILABLE when the member went away or lost its raft leader (the
  // watch asks etcd to end it then, as a member cut off from its cluster sees no changes);
  // OUT_OF_RANGE when `start_revision` was compacted away (the changes since are lost: read the
  // keys again). Either way a caller reads the keys again (GetPrefix) and watches from there.
  absl::Status Watch(std::string_view prefix, int64_t start_revision, grpc::ClientContext& ctx,
                     const OnChanges& on_changes);

 private:
  struct Endpoint;
  explicit EtcdClient(const EtcdOptions& options, std::vector<std::unique_ptr<Endpoint>> endpoints);
  // Runs `call` on the endpoints from the last that answered on, as the header describes.
  absl::Status Call(std::string_view what,
                    const std::function<grpc::Status(Endpoint&, grpc::ClientContext&)>& call);

  const EtcdOptions options_;
  const std::vector<std::unique_ptr<Endpoint>> endpoints_;
  absl::Mutex mu_;
  size_t current_ ABSL_GUARDED_BY(mu_) = 0;  // the endpoint that answered last
};

// The first key after every key that begins with `prefix`: etcd's range_end for a prefix.
std::string PrefixEnd(std::string_view prefix);

}  // namespace glimpse::etcd
