#include "cache-node/cache_node_grpc.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/cache_client/proto_convert.h"
#include "core/common/grpc/identity.h"
#include "core/common/grpc/status.h"
#include "core/common/status_macros.h"
#include "core/transport/peer_allowlist.h"

namespace glimpse::cache_node {
namespace {

using cache_client::BytesOf;
using cache_client::Key16FromBytes;

absl::Time Deadline(const grpc::ServerContext* ctx) {
  const auto d = ctx->deadline();
  if (d == std::chrono::system_clock::time_point::max()) return absl::Now() + absl::Seconds(60);
  return absl::FromChrono(d);
}

template <typename T>
grpc::Status Fail(const absl::StatusOr<T>& s) {
  return ToGrpcStatus(s.status());
}

}  // namespace

namespace {

// With an identified caller (mutual TLS), `address` — where the node sends a reply, or the engine
// a put comes from — must be one of the caller's own engines, as the coordinator's membership
// lists them: a worker cannot point the node at another node's engines.
absl::Status CheckOwnEngine(const grpc::ServerContext& ctx, transport::PeerAllowlist* peers,
                            const std::string& address, const char* field) {
  ASSIGN_OR_RETURN(const std::optional<PeerIdentity> caller, CallerIdentity(ctx));
  if (!caller.has_value() || peers == nullptr) return absl::OkStatus();
  if (peers->Belongs(address, caller->role, caller->id)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(field, ": ", transport::DescribeAddress(address),
                                                  " is not an engine of ", caller->role, " '",
                                                  caller->id, "'"));
}

}  // namespace

grpc::Status CacheNodeGrpc::BeginPut(grpc::ServerContext* ctx, const v1::CacheBeginPutRequest* req,
                                     v1::CacheBeginPutResponse* resp) {
  // A copy (replication) comes from another cache node, and only from one.
  GRPC_RETURN_IF_ERROR(Authorize(
      *ctx, "BeginPut",
      req->copy() ? std::initializer_list<std::string_view>{roles::kCache}
                  : std::initializer_list<std::string_view>{roles::kDecode, roles::kPrefill}));
  GRPC_RETURN_IF_ERROR(
      CheckOwnEngine(*ctx, service_->peers(), req->sender_address(), "sender_address"));
  absl::StatusOr<kvstate::Manifest> m = cache_client::ManifestFromProto(req->manifest());
  if (!m.ok()) return Fail(m);
  absl::StatusOr<PutTicket> t = service_->BeginPut(
      *std::move(m), std::span<const int32_t>(req->tokens().data(), req->tokens().size()),
      req->sender_address(), req->copy());
  if (!t.ok()) return Fail(t);
  resp->set_ticket(t->ticket);
  resp->set_transport_address(t->transport_address);
  return grpc::Status::OK;
}

grpc::Status CacheNodeGrpc::CommitPut(grpc::ServerContext* ctx,
                                      const v1::CacheCommitPutRequest* req,
                                      v1::CacheCommitPutResponse* resp) {
  GRPC_RETURN_IF_ERROR(
      Authorize(*ctx, "CommitPut", {roles::kDecode, roles::kPrefill, roles::kCache}));
  absl::StatusOr<CommitResult> r = service_->CommitPut(req->ticket(), Deadline(ctx));
  if (!r.ok()) return Fail(r);
  resp->set_already_stored(r->already_stored);
  resp->set_created_unix_micros(r->created_unix_micros);
  return grpc::Status::OK;
}

namespace {

// Key, model and pages of a CacheGetRequest or CacheGetItem; `field` prefixes the field names in
// errors ("" or "items[3].").
template <typename Msg>
absl::StatusOr<GetItem> ItemFromProto(const Msg& m, const std::string& field) {
  GetItem item;
  ASSIGN_OR_RETURN(item.key, Key16FromBytes(m.state_key(), field + "state_key"));
  ASSIGN_OR_RETURN(item.ns, Key16FromBytes(m.namespace_key(), field + "namespace_key"));
  ASSIGN_OR_RETURN(item.expected_model,
                   Key16FromBytes(m.expected_model().digest(), field + "expected_model.digest"));
  for (const v1::CachePageSelector& p : m.pages()) {
    item.pages.push_back({p.layer(), p.kv_head(), p.index()});
  }
  return item;
}

void ResultToProto(const GetResult& r, v1::CacheGetResponse* out) {
  cache_client::ManifestToProto(r.manifest, out->mutable_manifest());
  out->set_warm_hit(r.warm_hit);
}

}  // namespace

grpc::Status CacheNodeGrpc::Get(grpc::ServerContext* ctx, const v1::CacheGetRequest* req,
                                v1::CacheGetResponse* resp) {
  GRPC_RETURN_IF_ERROR(Authorize(*ctx, "Get", {roles::kDecode, roles::kPrefill}));
  GRPC_RETURN_IF_ERROR(
      CheckOwnEngine(*ctx, service_->peers(), req->reply_address(), "reply_address"));
  absl::StatusOr<GetItem> item = ItemFromProto(*req, "");
  if (!item.ok()) return Fail(item);
  GetRequest g{item->key,
               item->ns,
               item->expected_model,
               std::move(item->pages),
               req->reply_address(),
               req->request_id()};
  absl::StatusOr<GetResult> r = service_->Get(g, Deadline(ctx));
  if (!r.ok()) return Fail(r);
  ResultToProto(*r, resp);
  return grpc::Status::OK;
}

grpc::Status CacheNodeGrpc::GetMany(grpc::ServerContext* ctx, const v1::CacheGetManyRequest* req,
                                    v1::CacheGetManyResponse* resp) {
  GRPC_RETURN_IF_ERROR(Authorize(*ctx, "GetMany", {roles::kDecode, roles::kPrefill}));
  GRPC_RETURN_IF_ERROR(
      CheckOwnEngine(*ctx, service_->peers(), req->reply_address(), "reply_address"));
  GetManyRequest g;
  g.items.reserve(req->items_size());
  for (int i = 0; i < req->items_size(); ++i) {
    absl::StatusOr<GetItem> item = ItemFromProto(req->items(i), absl::StrCat("items[", i, "]."));
    if (!item.ok()) return Fail(item);
    g.items.push_back(*std::move(item));
  }
  g.reply_address = req->reply_address();
  g.request_id = req->request_id();
  absl::StatusOr<std::vector<GetResult>> r = service_->GetMany(g, Deadline(ctx));
  if (!r.ok()) return Fail(r);
  for (const GetResult& one : *r) ResultToProto(one, resp->add_states());
  return grpc::Status::OK;
}

grpc::Status CacheNodeGrpc::Lookup(grpc::ServerContext* ctx, const v1::CacheLookupRequest* req,
                                   v1::CacheLookupResponse* resp) {
  GRPC_RETURN_IF_ERROR(Authorize(*ctx, "Lookup", {roles::kDecode, roles::kPrefill}));
  absl::StatusOr<kvstate::NamespaceKey> ns = Key16FromBytes(req->namespace_key(), "namespace_key");
  if (!ns.ok()) return Fail(ns);
  absl::StatusOr<LookupResult> r =
      service_->Lookup(*ns, std::span<const int32_t>(req->tokens().data(), req->tokens().size()));
  if (!r.ok()) return Fail(r);
  resp->set_found(r->found);
  if (r->found) resp->set_state_key(BytesOf(r->key));
  resp->set_token_count(r->token_count);
  resp->set_bytes(r->bytes);
  resp->set_pinned(r->pinned);
  resp->set_warm(r->warm);
  return grpc::Status::OK;
}

grpc::Status CacheNodeGrpc::Pin(grpc::ServerContext* ctx, const v1::CacheStateKeyRequest* req,
                                v1::CacheEmpty*) {
  GRPC_RETURN_IF_ERROR(Authorize(*ctx, "Pin", {roles::kDecode, roles::kPrefill}));
  absl::StatusOr<kvstate::StateKey> key = Key16FromBytes(req->state_key(), "state_key");
  if (!key.ok()) return Fail(key);
  absl::StatusOr<kvstate::NamespaceKey> ns = Key16FromBytes(req->namespace_key(), "namespace_key");
  if (!ns.ok()) return Fail(ns);
  return ToGrpcStatus(service_->Pin(*ns, *key));
}

grpc::Status CacheNodeGrpc::Unpin(grpc::ServerContext* ctx, const v1::CacheStateKeyRequest* req,
                                  v1::CacheEmpty*) {
  GRPC_RETURN_IF_ERROR(Authorize(*ctx, "Unpin", {roles::kDecode, roles::kPrefill}));
  absl::StatusOr<kvstate::StateKey> key = Key16FromBytes(req->state_key(), "state_key");
  if (!key.ok()) return Fail(key);
  absl::StatusOr<kvstate::NamespaceKey> ns = Key16FromBytes(req->namespace_key(), "namespace_key");
  if (!ns.ok()) return Fail(ns);
  return ToGrpcStatus(service_->Unpin(*ns, *key));
}

grpc::Status CacheNodeGrpc::Delete(grpc::ServerContext* ctx, const v1::CacheStateKeyRequest* req,
                                   v1::CacheEmpty*) {
  GRPC_RETURN_IF_ERROR(Authorize(*ctx, "Delete", {roles::kDecode, roles::kPrefill}));
  absl::StatusOr<kvstate::StateKey> key = Key16FromBytes(req->state_key(), "state_key");
  if (!key.ok()) return Fail(key);
  absl::StatusOr<kvstate::NamespaceKey> ns = Key16FromBytes(req->namespace_key(), "namespace_key");
  if (!ns.ok()) return Fail(ns);
  return ToGrpcStatus(service_->Delete(*ns, *key));
}

grpc::Status CacheNodeGrpc::Has(grpc::ServerContext* ctx, const v1::CacheStateKeyRequest* req,
                                v1::CacheHasResponse* resp) {
  GRPC_RETURN_IF_ERROR(Authorize(*ctx, "Has", {roles::kDecode, roles::kPrefill, roles::kCache}));
  absl::StatusOr<kvstate::StateKey> key = Key16FromBytes(req->state_key(), "state_key");
  if (!key.ok()) return Fail(key);
  absl::StatusOr<kvstate::NamespaceKey> ns = Key16FromBytes(req->namespace_key(), "namespace_key");
  if (!ns.ok()) return Fail(ns);
  const kvstate::Held held = service_->Holds(*ns, *key);
  resp->set_stored(held.stored);
  resp->set_deleted_unix_micros(held.deleted_unix_micros);
  return grpc::Status::OK;
}

grpc::Status CacheNodeGrpc::Stats(grpc::ServerContext* ctx, const v1::CacheStatsRequest*,
                                  v1::CacheStatsResponse* resp) {
  GRPC_RETURN_IF_ERROR(Authorize(*ctx, "Stats", {roles::kDecode, roles::kPrefill, roles::kAdmin}));
  const CacheNodeStats s = service_->Stats();
  resp->set_states(s.states);
  resp->set_stored_bytes(s.stored_bytes);
  resp->set_pinned_states(s.pinned_states);
  resp->set_pinned_bytes(s.pinned_bytes);
  resp->set_warm_bytes(s.warm.bytes);
  resp->set_warm_states(s.warm.entries);
  resp->set_warm_budget_bytes(s.warm_budget_bytes);
  resp->set_warm_hits(s.warm.hits);
  resp->set_warm_misses(s.warm.misses);
  resp->set_puts(s.puts);
  resp->set_gets(s.gets);
  resp->set_lookups(s.lookups);
  resp->set_bytes_put(s.bytes_put);
  resp->set_bytes_got(s.bytes_got);
  resp->set_rocksdb_sst_bytes(s.storage.sst_bytes);
  resp->set_rocksdb_wal_bytes(s.storage.wal_bytes);
  resp->set_rocksdb_memtable_bytes(s.storage.memtable_bytes);
  resp->set_retention_deleted(s.retention_deleted);
  return grpc::Status::OK;
}

}  // namespace glimpse::cache_node
