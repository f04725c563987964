#include "core/etcd/etcd_client.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/grpc/status.h"
#include "core/common/status_macros.h"
#include "etcdserverpb/rpc.grpc.pb.h"

namespace glimpse::etcd {

struct EtcdClient::Endpoint {
  std::string address;
  std::unique_ptr<etcdserverpb::KV::Stub> kv;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  std::unique_ptr<etcdserverpb::Watch::Stub> watch;
};

namespace {

// Holds when `key` exists and was created at `revision` (0: when it does not exist).
void CompareCreated(std::string_view key, int64_t revision, etcdserverpb::Compare* c) {
  c->set_result(etcdserverpb::Compare::EQUAL);
  c->set_target(etcdserverpb::Compare::CREATE);
  c->set_key(std::string(key));
  c->set_create_revision(revision);
}

EtcdClient::Versioned FromKeyValue(const mvccpb::KeyValue& kv) {
  return {kv.value(), kv.create_revision(), kv.lease()};
}

}  // namespace

std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  // The last byte below 0xff goes up by one and what follows it is dropped ("a/" -> "a0").
  while (!end.empty()) {
    unsigned char& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every byte 0xff: to the end of the key space
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(const EtcdOptions& options) {
  if (options.endpoints.empty()) return absl::InvalidArgumentError("etcd: no endpoints");
  if (options.timeout <= absl::ZeroDuration() || options.page_keys < 1) {
    return absl::InvalidArgumentError("etcd: the call timeout and page size must be positive");
  }
  std::vector<std::unique_ptr<Endpoint>> endpoints;
  for (const std::string& address : options.endpoints) {
    ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                     ClientChannel(address, options.tls, kEtcdKeepaliveInterval));
    endpoints.push_back(std::make_unique<Endpoint>(
        Endpoint{address, etcdserverpb::KV::NewStub(channel), etcdserverpb::Lease::NewStub(channel),
                 etcdserverpb::Watch::NewStub(channel)}));
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(options, std::move(endpoints)));
}

EtcdClient::EtcdClient(const EtcdOptions& options, std::vector<std::unique_ptr<Endpoint>> endpoints)
    : options_(options), endpoints_(std::move(endpoints)) {}

EtcdClient::~EtcdClient() = default;

absl::Status EtcdClient::Call(
    std::string_view what,
    const std::function<grpc::Status(Endpoint&, grpc::ClientContext&)>& call) {
  size_t first;
  {
    absl::MutexLock lock(&mu_);
    first = current_;
  }
  std::vector<std::string> failures;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    const size_t e = (first + i) % endpoints_.size();
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     absl::ToChronoMilliseconds(options_.timeout));
    const grpc::Status st = call(*endpoints_[e], ctx);
    const grpc::StatusCode code = st.error_code();
    if (code != grpc::StatusCode::UNAVAILABLE && code != grpc::StatusCode::DEADLINE_EXCEEDED) {
      absl::MutexLock lock(&mu_);
      current_ = e;
      if (st.ok()) return absl::OkStatus();
      return absl::Status(static_cast<absl::StatusCode>(code),
                          absl::StrCat("etcd ", endpoints_[e]->address, " ", std::string(what),
                                       ": ", st.error_message()));
    }
    failures.push_back(absl::StrCat(endpoints_[e]->address, ": ", st.error_message()));
  }
  return absl::UnavailableError(absl::StrCat("etcd ", std::string(what), ": no endpoint answered (",
                                             absl::StrJoin(failures, "; "), ")"));
}

absl::Status EtcdClient::Put(std::string_view key, std::string_view value, int64_t lease) {
  etcdserverpb::PutRequest req;
  req.set_key(std::string(key));
  req.set_value(std::string(value));
  req.set_lease(lease);
  etcdserverpb::PutResponse resp;
  return Call("Put",
              [&](Endpoint& e, grpc::ClientContext& ctx) { return e.kv->Put(&ctx, req, &resp); });
}

absl::Status EtcdClient::Delete(std::string_view key) {
  etcdserverpb::DeleteRangeRequest req;
  req.set_key(std::string(key));
  etcdserverpb::DeleteRangeResponse resp;
  return Call("DeleteRange", [&](Endpoint& e, grpc::ClientContext& ctx) {
    return e.kv->DeleteRange(&ctx, req, &resp);
  });
}

absl::Status EtcdClient::Apply(const std::vector<Write>& writes,
                               const std::optional<Guard>& guard) {
  if (writes.size() > kMaxTxnOps) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd Txn: ", writes.size(), " operations; at most ", kMaxTxnOps));
  }
  etcdserverpb::TxnRequest req;
  if (guard.has_value()) CompareCreated(guard->key, guard->create_revision, req.add_compare());
  for (const auto& [key, value] : writes) {
    etcdserverpb::RequestOp* op = req.add_success();
    if (value.has_value()) {
      op->mutable_request_put()->set_key(key);
      op->mutable_request_put()->set_value(*value);
    } else {
      op->mutable_request_delete_range()->set_key(key);
    }
  }
  etcdserverpb::TxnResponse resp;
  RETURN_IF_ERROR(Call(
      "Txn", [&](Endpoint& e, grpc::ClientContext& ctx) { return e.kv->Txn(&ctx, req, &resp); }));
  if (!resp.succeeded()) {
    return absl::FailedPreconditionError(absl::StrCat("etcd Txn: ", guard->key,
                                                      " is no longer the one created at revision ",
                                                      guard->create_revision, "; nothing written"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<EtcdClient::Versioned>> EtcdClient::Get(std::string_view key) {
  etcdserverpb::RangeRequest req;
  req.set_key(std::string(key));
  etcdserverpb::RangeResponse resp;
  RETURN_IF_ERROR(Call("Range", [&](Endpoint& e, grpc::ClientContext& ctx) {
    return e.kv->Range(&ctx, req, &resp);
  }));
  if (resp.kvs().empty()) return std::nullopt;
  return FromKeyValue(resp.kvs(0));
}

absl::StatusOr<EtcdClient::Versioned> EtcdClient::PutIfAbsent(std::string_view key,
                                                              std::string_view value,
                                                              int64_t lease) {
  etcdserverpb::TxnRequest req;
  CompareCreated(key, 0, req.add_compare());
  etcdserverpb::PutRequest* put = req.add_success()->mutable_request_put();
  put->set_key(std::string(key));
  put->set_value(std::string(value));
  put->set_lease(lease);
  req.add_failure()->mutable_request_range()->set_key(std::string(key));
  etcdserverpb::TxnResponse resp;
  RETURN_IF_ERROR(Call(
      "Txn", [&](Endpoint& e, grpc::ClientContext& ctx) { return e.kv->Txn(&ctx, req, &resp); }));
  // The key was created by this transaction, so at its revision.
  if (resp.succeeded()) return Versioned{std::string(value), resp.header().revision(), lease};
  const etcdserverpb::RangeResponse& range = resp.responses(0).response_range();
  if (range.kvs().empty()) {  // deleted between the compare and the read: cannot happen in a txn
    return absl::InternalError(
        absl::StrCat("etcd Txn: ", std::string(key), " neither absent nor present"));
  }
  return FromKeyValue(range.kvs(0));
}

absl::StatusOr<EtcdClient::Lease> EtcdClient::GrantLease(absl::Duration ttl) {
  etcdserverpb::LeaseGrantRequest req;
  req.set_ttl(std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1)))));
  etcdserverpb::LeaseGrantResponse resp;
  RETURN_IF_ERROR(Call("LeaseGrant", [&](Endpoint& e, grpc::ClientContext& ctx) {
    return e.lease->LeaseGrant(&ctx, req, &resp);
  }));
  if (!resp.error().empty()) {
    return absl::UnavailableError(absl::StrCat("etcd LeaseGrant: ", resp.error()));
  }
  return Lease{resp.id(), absl::Seconds(resp.ttl())};
}

absl::StatusOr<absl::Duration> EtcdClient::KeepAlive(int64_t lease) {
  etcdserverpb::LeaseKeepAliveRequest req;
  req.set_id(lease);
  etcdserverpb::LeaseKeepAliveResponse resp;
  // One request and its answer on a stream of their own: a renewal every few seconds does not
  // need a stream held open across calls (and their failures).
  RETURN_IF_ERROR(Call("LeaseKeepAlive", [&](Endpoint& e, grpc::ClientContext& ctx) {
    auto stream = e.lease->LeaseKeepAlive(&ctx);
    const bool answered = stream->Write(req) && stream->Read(&resp);
    stream->WritesDone();
    grpc::Status st = stream->Finish();
    if (st.ok() && !answered) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the stream ended without an answer");
    }
    return st;
  }));
  if (resp.ttl() <= 0) {
    return absl::NotFoundError(absl::StrCat("etcd lease ", lease, " has expired"));
  }
  return absl::Seconds(resp.ttl());
}

absl::Status EtcdClient::RevokeLease(int64_t lease) {
  etcdserverpb::LeaseRevokeRequest req;
  req.set_id(lease);
  etcdserverpb::LeaseRevokeResponse resp;
  const absl::Status st = Call("LeaseRevoke", [&](Endpoint& e, grpc::ClientContext& ctx) {
    return e.lease->LeaseRevoke(&ctx, req, &resp);
  });
  return absl::IsNotFound(st) ? absl::OkStatus() : st;
}

absl::StatusOr<KeyValues> EtcdClient::GetPrefix(std::string_view prefix, int64_t* read_at) {
  if (prefix.empty()) return absl::InvalidArgumentError("etcd GetPrefix: empty prefix");
  KeyValues out;
  etcdserverpb::RangeRequest req;
  req.set_key(std::string(prefix));
  req.set_range_end(PrefixEnd(prefix));
  req.set_limit(options_.page_keys);
  // Every page at the first page's revision: one consistent snapshot however many pages.
  int64_t revision = 0;
  while (true) {
    req.set_revision(revision);
    etcdserverpb::RangeResponse resp;
    const absl::Status st = Call("Range", [&](Endpoint& e, grpc::ClientContext& ctx) {
      return e.kv->Range(&ctx, req, &resp);
    });
    // A page over gRPC's message limit (large values): fewer keys per page. One key always fits,
    // as etcd takes no request over 1.5 MiB.
    if (st.code() == absl::StatusCode::kResourceExhausted && req.limit() > 1) {
      req.set_limit(req.limit() / 2);
      continue;
    }
    RETURN_IF_ERROR(st);
    if (revision == 0) {
      revision = resp.header().revision();
      if (read_at != nullptr) *read_at = revision;
    }
    for (const mvccpb::KeyValue& kv : resp.kvs()) out.emplace_back(kv.key(), kv.value());
    if (!resp.more() || resp.kvs().empty()) return out;
    req.set_key(resp.kvs().rbegin()->key() + std::string(1, '\0'));  // the next key after it
  }
}

absl::Status EtcdClient::Watch(std::string_view prefix, int64_t start_revision,
                               grpc::ClientContext& ctx, const OnChanges& on_changes) {
  Endpoint* e;
  {
    absl::MutexLock lock(&mu_);
    e = endpoints_[current_].get();
  }
  // etcd's "require leader": a member that loses its raft leader ends the watch, instead of
  // leaving it open and silent while the rest of the cluster changes.
  ctx.AddMetadata("hasleader", "true");
  auto stream = e->watch->Watch(&ctx);
  etcdserverpb::WatchRequest req;
  etcdserverpb::WatchCreateRequest* create = req.mutable_create_request();
  create->set_key(std::string(prefix));
  create->set_range_end(PrefixEnd(prefix));
  create->set_start_revision(start_revision);
  const std::string where = absl::StrCat("etcd ", e->address, " Watch: ");
  std::optional<absl::Status> refused;  // etcd ended the watch itself
  etcdserverpb::WatchResponse resp;
  if (stream->Write(req)) {
    std::vector<Change> changes;
    while (stream->Read(&resp)) {
      if (resp.canceled()) {
        refused = resp.compact_revision() > 0
                      ? absl::OutOfRangeError(absl::StrCat(where, "revision ", start_revision,
                                                           " was compacted (now ",
                                                           resp.compact_revision(), ")"))
                      : absl::UnavailableError(absl::StrCat(where, resp.cancel_reason()));
        ctx.TryCancel();
        break;
      }
      changes.clear();
      for (const mvccpb::Event& ev : resp.events()) {
        changes.push_back({ev.kv().key(), ev.type() == mvccpb::Event::DELETE
                                              ? std::nullopt
                                              : std::optional<std::string>(ev.kv().value())});
      }
      if (!changes.empty()) on_changes(changes);
    }
  }
  const grpc::Status st = stream->Finish();
  if (refused.has_value()) return *refused;
  if (st.ok()) return absl::UnavailableError(absl::StrCat(where, "the stream ended"));
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                      absl::StrCat(where, st.error_message()));
}

}  // namespace glimpse::etcd
