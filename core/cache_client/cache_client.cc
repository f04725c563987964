#include "core/cache_client/cache_client.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/cache_client/placement.h"
#include "core/cache_client/proto_convert.h"
#include "core/common/grpc/status.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/kvstate/transfer_header.h"

namespace glimpse::cache_client {

namespace {

bool Down(const absl::Status& st) {
  return absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st);
}

}  // namespace

CacheClient::CacheClient(const CacheClientOptions& options) : options_(options) {
  // Random first request id: replies meant for an earlier client on the same address are ignored.
  next_request_ = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
}

absl::StatusOr<std::unique_ptr<CacheClient>> CacheClient::Create(
    const CacheClientOptions& options,
    std::vector<std::unique_ptr<transport::Transport>> transports) {
  if (transports.empty()) return absl::InvalidArgumentError("cache client needs a transport");
  for (const auto& t : transports) {
    if (t == nullptr) return absl::InvalidArgumentError("cache client given a null transport");
  }
  if (options.replicas < 1 || options.write_quorum < 0 || options.write_quorum > options.replicas) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache client: replicas ", options.replicas, " and write quorum ", options.write_quorum,
        " (need replicas >= 1 and 0 <= write quorum <= replicas)"));
  }
  std::unique_ptr<CacheClient> c(new CacheClient(options));
  RETURN_IF_ERROR(c->SetNodes(options.addresses));
  for (auto& t : transports) {
    c->lanes_.push_back(std::make_unique<Lane>(c->lanes_.size(), std::move(t)));
  }
  {
    absl::MutexLock lock(&c->replies_mu_);
    c->lane_calls_.assign(c->lanes_.size(), 0);
  }
  for (auto& lane : c->lanes_) {
    lane->receiver = std::thread([p = c.get(), l = lane.get()] { p->ReceiveLoop(l); });
  }
  return c;
}

CacheClient::~CacheClient() {
  {
    absl::MutexLock lock(&replies_mu_);
    stopping_ = true;
  }
  replies_cv_.SignalAll();
  for (auto& lane : lanes_) {
    if (lane->receiver.joinable()) lane->receiver.join();
  }
}

CacheClient::Lane& CacheClient::AcquireLane() {
  absl::MutexLock lock(&replies_mu_);
  size_t best = 0;
  for (size_t i = 1; i < lanes_.size(); ++i) {
    if (lane_calls_[i] < lane_calls_[best]) best = i;
  }
  ++lane_calls_[best];
  return *lanes_[best];
}

void CacheClient::ReleaseLane(Lane& lane) {
  absl::MutexLock lock(&replies_mu_);
  --lane_calls_[lane.index];
}

std::vector<transport::Metrics> CacheClient::TransportMetrics() const {
  std::vector<transport::Metrics> out;
  for (const auto& lane : lanes_) out.push_back(lane->transport->GetMetrics());
  return out;
}

void CacheClient::SetDeadline(grpc::ClientContext* ctx) const {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
}

void CacheClient::ReceiveLoop(Lane* lane) {
  for (;;) {
    {
      absl::MutexLock lock(&replies_mu_);
      if (stopping_) return;
    }
    absl::StatusOr<transport::ReceivedBatch> got =
        lane->transport->Receive(absl::Now() + absl::Milliseconds(100));
    if (!got.ok()) {
      if (got.status().code() != absl::StatusCode::kDeadlineExceeded) {
        log::Warning("cache client: a reply batch failed", {{"error", got.status().ToString()}});
      }
      continue;
    }
    absl::StatusOr<kvstate::BatchHeader> h = got->buffers().empty()
                                                 ? absl::InvalidArgumentError("empty batch")
                                                 : kvstate::DecodeBatchHeader(got->buffers()[0]);
    absl::MutexLock lock(&replies_mu_);
    if (!h.ok() || h->kind != kvstate::BatchKind::kGetReply || awaited_.count(h->id) == 0) {
      log::Warning("cache client: dropped an unexpected batch",
                   {{"error", h.ok() ? absl::StrCat("request ", h->id) : h.status().ToString()}});
      continue;
    }
    replies_.insert_or_assign(h->id, std::move(got));
    replies_cv_.SignalAll();
  }
}

absl::Status CacheClient::SetNodes(const std::vector<std::string>& addresses) {
  std::shared_ptr<const Nodes> old;
  {
    absl::MutexLock lock(&nodes_mu_);
    old = nodes_;
  }
  auto next = std::make_shared<Nodes>();
  next->most = std::max(old == nullptr ? 0 : old->most, addresses.size());
  for (const std::string& address : addresses) {
    std::shared_ptr<v1::CacheNode::Stub> stub;
    if (old != nullptr) {
      if (absl::StatusOr<const Node*> kept = Find(*old, address); kept.ok()) stub = (*kept)->stub;
    }
    if (stub == nullptr) {
      absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = ClientChannel(address, options_.tls);
      if (!channel.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("cache node ", address, ": ", channel.status().message()));
      }
      stub = v1::CacheNode::NewStub(*std::move(channel));
    }
    next->addresses.push_back(address);
    next->nodes.push_back({address, std::move(stub)});
  }
  absl::MutexLock lock(&nodes_mu_);
  nodes_ = std::move(next);
  return absl::OkStatus();
}

std::vector<std::string> CacheClient::nodes() const {
  absl::MutexLock lock(&nodes_mu_);
  return nodes_->addresses;
}

absl::StatusOr<std::shared_ptr<const CacheClient::Nodes>> CacheClient::Snapshot() const {
  absl::MutexLock lock(&nodes_mu_);
  if (nodes_->nodes.empty()) return absl::UnavailableError("no cache node is live");
  return nodes_;
}

absl::StatusOr<const CacheClient::Node*> CacheClient::Find(const Nodes& nodes,
                                                           const std::string& address) {
  for (const Node& n : nodes.nodes) {
    if (n.address == address) return &n;
  }
  return absl::NotFoundError(absl::StrCat(address, " is not one of the cache nodes"));
}

std::vector<const CacheClient::Node*> CacheClient::Placement(const Nodes& nodes,
                                                             const kvstate::StateKey& key) const {
  std::vector<const Node*> healthy, suspects;
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&suspects_mu_);
  for (size_t i : RendezvousOrder(key, nodes.addresses)) {
    const Node* n = &nodes.nodes[i];
    auto it = suspect_until_.find(n->address);
    (it != suspect_until_.end() && it->second > now ? suspects : healthy).push_back(n);
  }
  healthy.insert(healthy.end(), suspects.begin(), suspects.end());
  return healthy;
}

bool CacheClient::Suspect(const Node& node, const absl::Status& failure) {
  if (!Down(failure)) return false;
  absl::MutexLock lock(&suspects_mu_);
  suspect_until_[node.address] = absl::Now() + kSuspectFor;
  return true;
}

namespace {

absl::Status CheckPageCount(const kvstate::Manifest& manifest,
                            std::span<const std::span<const uint8_t>> pages) {
  if (pages.size() == manifest.pages.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("put of ", pages.size(), " pages for a manifest of ", manifest.pages.size()));
}

}  // namespace

absl::StatusOr<PutResult> CacheClient::PutCopy(const std::string& node,
                                               const kvstate::Manifest& manifest,
                                               std::span<const std::span<const uint8_t>> pages) {
  RETURN_IF_ERROR(CheckPageCount(manifest, pages));
  ASSIGN_OR_RETURN(std::shared_ptr<const Nodes> nodes, Snapshot());
  ASSIGN_OR_RETURN(const Node* target, Find(*nodes, node));
  return PutOn(*target, manifest, {}, Pack(pages), /*copy=*/true);
}

absl::StatusOr<PutResult> CacheClient::Put(const kvstate::Manifest& manifest,
                                           std::span<const int32_t> tokens,
                                           std::span<const std::span<const uint8_t>> pages) {
  constexpr bool copy = false;
  RETURN_IF_ERROR(CheckPageCount(manifest, pages));
  ASSIGN_OR_RETURN(std::shared_ptr<const Nodes> nodes, Snapshot());
  // W as configured, at most the most nodes ever listed: a cluster that lost nodes still needs W
  // copies (its puts fail while fewer are alive), one that only ever had fewer stores what it can.
  const size_t w = std::min<size_t>(
      options_.write_quorum > 0 ? options_.write_quorum : options_.replicas, nodes->most);
  // One packed buffer for every replica: one memcpy saves the transport a rendezvous per page.
  const std::vector<uint8_t> packed = Pack(pages);
  if (nodes->nodes.size() == 1 && w == 1) {
    return PutOn(nodes->nodes[0], manifest, tokens, packed, copy);
  }
  const std::vector<const Node*> order = Placement(*nodes, manifest.state_key);
  const size_t r = std::min<size_t>(options_.replicas, order.size());  // R, at most the nodes
  // The R highest-ranked at once: a replicated put costs about one put's time, not R.
  std::vector<absl::StatusOr<PutResult>> results(r, absl::UnknownError("not sent"));
  {
    std::vector<std::thread> others;
    for (size_t i = 1; i < r; ++i) {
      others.emplace_back(
          [&, i] { results[i] = PutOn(*order[i], manifest, tokens, packed, copy); });
    }
    results[0] = PutOn(*order[0], manifest, tokens, packed, copy);
    for (std::thread& t : others) t.join();
  }
  std::optional<PutResult> stored;
  size_t copies = 0;
  std::vector<std::string> failures;
  auto tally = [&](const Node& node, const absl::StatusOr<PutResult>& result) {
    if (result.ok()) {
      ++copies;
      if (!stored.has_value()) stored = *result;
      return;
    }
    Suspect(node, result.status());
    failures.push_back(absl::StrCat(node.address, ": ", result.status().ToString()));
  };
  for (size_t i = 0; i < r; ++i) tally(*order[i], results[i]);
  // A replica that failed is replaced by the next node in the ranking, so that R copies exist
  // while a node is down.
  for (size_t next = r; copies < r && next < order.size(); ++next) {
    tally(*order[next], PutOn(*order[next], manifest, tokens, packed, copy));
  }
  if (copies >= w) return *stored;
  return absl::UnavailableError(absl::StrCat("cache put stored ", copies, " of the ", w,
                                             " copies required: ", absl::StrJoin(failures, "; ")));
}

std::vector<uint8_t> CacheClient::Pack(std::span<const std::span<const uint8_t>> pages) {
  size_t total = 0;
  for (const auto& p : pages) total += p.size();
  std::vector<uint8_t> packed(total);
  size_t off = 0;
  for (const auto& p : pages) {
    std::memcpy(packed.data() + off, p.data(), p.size());
    off += p.size();
  }
  return packed;
}

absl::StatusOr<PutResult> CacheClient::PutOn(const Node& node, const kvstate::Manifest& manifest,
                                             std::span<const int32_t> tokens,
                                             std::span<const uint8_t> packed, bool copy) {
  Lane& lane = AcquireLane();
  absl::Cleanup release = [&] { ReleaseLane(lane); };
  v1::CacheBeginPutRequest begin;
  ManifestToProto(manifest, begin.mutable_manifest());
  begin.mutable_tokens()->Add(tokens.begin(), tokens.end());
  begin.set_sender_address(lane.transport->LocalAddress());
  begin.set_copy(copy);
  v1::CacheBeginPutResponse ticket;
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    RETURN_IF_ERROR(FromGrpcStatus(node.stub->BeginPut(&ctx, begin, &ticket)));
  }
  const auto header = kvstate::EncodeBatchHeader({kvstate::BatchKind::kPut, ticket.ticket(),
                                                  static_cast<uint32_t>(manifest.pages.size()),
                                                  kvstate::BatchHeader::kPacked});
  const std::span<const uint8_t> bufs[] = {header, packed};
  ASSIGN_OR_RETURN(transport::PeerId peer, lane.peers.Get(ticket.transport_address()));
  transport::SubmitOptions so;
  so.deadline = absl::Now() + options_.timeout;
  so.checksum = false;  // CommitPut fully decodes every page, CRC32C included
  absl::StatusOr<transport::TransferId> id = lane.transport->Submit(peer, bufs, so);
  absl::Status sent =
      id.ok() ? lane.transport->Wait(*id, so.deadline + absl::Seconds(5)) : id.status();
  if (!sent.ok()) {
    lane.peers.Forget(ticket.transport_address());
    return absl::Status(sent.code(),
                        absl::StrCat("shipping the pages to the cache node: ", sent.message()));
  }
  v1::CacheCommitPutRequest commit;
  commit.set_ticket(ticket.ticket());
  v1::CacheCommitPutResponse done;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  RETURN_IF_ERROR(FromGrpcStatus(node.stub->CommitPut(&ctx, commit, &done)));
  return PutResult{done.already_stored(), done.created_unix_micros()};
}

absl::StatusOr<transport::ReceivedBatch> CacheClient::AwaitReply(uint64_t id, absl::Time deadline) {
  absl::MutexLock lock(&replies_mu_);
  while (!stopping_ && replies_.count(id) == 0) {
    if (replies_cv_.WaitWithDeadline(&replies_mu_, deadline)) break;  // timed out
  }
  awaited_.erase(id);
  auto it = replies_.find(id);
  if (it == replies_.end()) {
    return absl::DeadlineExceededError(
        absl::StrCat("the pages of get request ", id, " did not arrive before the deadline"));
  }
  auto node = replies_.extract(it);
  return std::move(node.mapped());
}

namespace {

void AddSelectors(const std::vector<kvstate::PageId>& pages,
                  google::protobuf::RepeatedPtrField<v1::CachePageSelector>* out) {
  for (const kvstate::PageId& p : pages) {
    v1::CachePageSelector* s = out->Add();
    s->set_layer(p.layer);
    s->set_kv_head(p.kv_head);
    s->set_index(p.index);
  }
}

}  // namespace

uint64_t CacheClient::NewRequest() {
  absl::MutexLock lock(&replies_mu_);
  const uint64_t id = next_request_++;
  awaited_.insert(id);
  return id;
}

void CacheClient::DropRequest(uint64_t id) {
  absl::MutexLock lock(&replies_mu_);
  awaited_.erase(id);
  replies_.erase(id);
}

absl::StatusOr<std::vector<State>> CacheClient::FinishGet(
    uint64_t id, absl::Time deadline, std::span<const v1::CacheGetResponse* const> responses) {
  // The node answers after its transfer completed; the batch is here or about to be.
  ASSIGN_OR_RETURN(transport::ReceivedBatch received, AwaitReply(id, deadline));
  auto batch = std::make_shared<const transport::ReceivedBatch>(std::move(received));
  std::vector<State> out(responses.size());
  std::vector<uint32_t> sizes;
  for (size_t i = 0; i < responses.size(); ++i) {
    ASSIGN_OR_RETURN(out[i].manifest, ManifestFromProto(responses[i]->manifest()));
    out[i].warm_hit = responses[i]->warm_hit();
    for (const kvstate::PageRef& p : out[i].manifest.pages) sizes.push_back(p.bytes);
  }
  const auto& bufs = batch->buffers();
  ASSIGN_OR_RETURN(const kvstate::BatchHeader h, kvstate::DecodeBatchHeader(bufs[0]));
  absl::StatusOr<std::vector<std::span<const uint8_t>>> pages =
      kvstate::UnpackPages(h, std::span<const std::span<const uint8_t>>(bufs).subspan(1), sizes);
  if (!pages.ok())
    return absl::DataLossError(absl::StrCat("get reply: ", pages.status().message()));
  // End to end: the node does not recompute page CRC32Cs, this does (cache_node_service.h).
  size_t next = 0;
  for (State& s : out) {
    for (const kvstate::PageRef& ref : s.manifest.pages) {
      RETURN_IF_ERROR(kvstate::CheckPage(s.manifest, ref, (*pages)[next], /*full_decode=*/false));
      s.pages.push_back((*pages)[next++]);
    }
    s.batch = batch;
  }
  return out;
}

absl::StatusOr<State> CacheClient::Get(const kvstate::NamespaceKey& ns,
                                       const kvstate::StateKey& key,
                                       const kvstate::Fingerprint& model,
                                       const std::vector<kvstate::PageId>& pages) {
  ASSIGN_OR_RETURN(std::shared_ptr<const Nodes> nodes, Snapshot());
  if (nodes->nodes.size() == 1) return GetOn(nodes->nodes[0], ns, key, model, pages);
  absl::Status last;
  bool missing_only = true;
  for (const Node* node : Placement(*nodes, key)) {
    absl::StatusOr<State> got = GetOn(*node, ns, key, model, pages);
    if (got.ok()) return got;
    // Past a node that lacks it, is down, or holds a copy that fails its checksum: the next.
    const absl::Status& st = got.status();
    if (!absl::IsNotFound(st) && !Suspect(*node, st) && !absl::IsDataLoss(st)) return st;
    if (!absl::IsNotFound(st)) {
      missing_only = false;
      last = absl::Status(st.code(), absl::StrCat(node->address, ": ", st.message()));
    }
  }
  if (missing_only) return absl::NotFoundError("no cache node holds the state");
  return last;
}

absl::StatusOr<State> CacheClient::GetOn(const Node& node, const kvstate::NamespaceKey& ns,
                                         const kvstate::StateKey& key,
                                         const kvstate::Fingerprint& model,
                                         const std::vector<kvstate::PageId>& pages) {
  v1::CacheGetRequest req;
  req.set_state_key(BytesOf(key));
  req.set_namespace_key(BytesOf(ns));
  req.mutable_expected_model()->set_digest(BytesOf(model));
  AddSelectors(pages, req.mutable_pages());
  Lane& lane = AcquireLane();
  absl::Cleanup release = [&] { ReleaseLane(lane); };
  req.set_reply_address(lane.transport->LocalAddress());
  const uint64_t id = NewRequest();
  req.set_request_id(id);
  v1::CacheGetResponse resp;
  grpc::ClientContext ctx;
  const absl::Time deadline = absl::Now() + options_.timeout;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  absl::Status s = FromGrpcStatus(node.stub->Get(&ctx, req, &resp));
  if (!s.ok()) {
    DropRequest(id);
    return s;
  }
  const v1::CacheGetResponse* const responses[] = {&resp};
  ASSIGN_OR_RETURN(std::vector<State> out, FinishGet(id, deadline, responses));
  return std::move(out[0]);
}

absl::StatusOr<std::vector<State>> CacheClient::GetMany(std::span<const GetSpec> states) {
  ASSIGN_OR_RETURN(std::shared_ptr<const Nodes> nodes, Snapshot());
  if (nodes->nodes.size() == 1) return GetManyOn(nodes->nodes[0], states);
  if (states.empty()) return absl::InvalidArgumentError("a batched get of no states");
  // One batched get per node, of the states it ranks first for, the nodes at once; the states of
  // a batch that failed (a node down, or lacking one of them: a batch is all or nothing) go one
  // by one through Get, which tries the rest of their ranking.
  std::map<const Node*, std::vector<size_t>> by_node;
  for (size_t i = 0; i < states.size(); ++i) {
    by_node[Placement(*nodes, states[i].key).front()].push_back(i);
  }
  std::vector<std::optional<State>> got(states.size());
  auto batch = [&](const Node* node, const std::vector<size_t>& items) {
    std::vector<GetSpec> specs;
    for (size_t i : items) specs.push_back(states[i]);
    absl::StatusOr<std::vector<State>> one = GetManyOn(*node, specs);
    if (!one.ok()) {
      Suspect(*node, one.status());
      return;
    }
    for (size_t k = 0; k < items.size(); ++k) got[items[k]] = std::move((*one)[k]);
  };
  {
    std::vector<std::thread> others;
    for (auto it = std::next(by_node.begin()); it != by_node.end(); ++it) {
      others.emplace_back([&, it] { batch(it->first, it->second); });
    }
    batch(by_node.begin()->first, by_node.begin()->second);
    for (std::thread& t : others) t.join();
  }
  std::vector<State> out;
  for (size_t i = 0; i < states.size(); ++i) {
    if (!got[i].has_value()) {
      ASSIGN_OR_RETURN(got[i], Get(states[i].ns, states[i].key, states[i].model, states[i].pages));
    }
    out.push_back(*std::move(got[i]));
  }
  return out;
}

absl::StatusOr<std::vector<State>> CacheClient::GetManyOn(const Node& node,
                                                          std::span<const GetSpec> states) {
  v1::CacheGetManyRequest req;
  for (const GetSpec& spec : states) {
    v1::CacheGetItem* item = req.add_items();
    item->set_state_key(BytesOf(spec.key));
    item->set_namespace_key(BytesOf(spec.ns));
    item->mutable_expected_model()->set_digest(BytesOf(spec.model));
    AddSelectors(spec.pages, item->mutable_pages());
  }
  Lane& lane = AcquireLane();
  absl::Cleanup release = [&] { ReleaseLane(lane); };
  req.set_reply_address(lane.transport->LocalAddress());
  const uint64_t id = NewRequest();
  req.set_request_id(id);
  v1::CacheGetManyResponse resp;
  grpc::ClientContext ctx;
  const absl::Time deadline = absl::Now() + options_.timeout;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  absl::Status s = FromGrpcStatus(node.stub->GetMany(&ctx, req, &resp));
  if (s.ok() && static_cast<size_t>(resp.states_size()) != states.size()) {
    s = absl::InternalError(absl::StrCat("batched get of ", states.size(), " states answered with ",
                                         resp.states_size()));
  }
  if (!s.ok()) {
    DropRequest(id);
    return s;
  }
  std::vector<const v1::CacheGetResponse*> responses;
  for (const v1::CacheGetResponse& r : resp.states()) responses.push_back(&r);
  return FinishGet(id, deadline, responses);
}

absl::StatusOr<LookupMatch> CacheClient::Lookup(const kvstate::NamespaceKey& ns,
                                                std::span<const int32_t> tokens) {
  ASSIGN_OR_RETURN(std::shared_ptr<const Nodes> nodes, Snapshot());
  if (nodes->nodes.size() == 1) return LookupOn(nodes->nodes[0], ns, tokens);
  std::optional<LookupMatch> best;
  absl::Status last;
  for (const Node& node : nodes->nodes) {
    absl::StatusOr<LookupMatch> m = LookupOn(node, ns, tokens);
    if (!m.ok()) {
      if (!Suspect(node, m.status())) return m.status();
      last = m.status();
      continue;
    }
    if (!best.has_value() || (m->found && (!best->found || m->token_count > best->token_count))) {
      best = *m;
    }
  }
  if (!best.has_value()) return last;  // none answered
  return *best;
}

absl::StatusOr<LookupMatch> CacheClient::LookupOn(const Node& node, const kvstate::NamespaceKey& ns,
                                                  std::span<const int32_t> tokens) {
  v1::CacheLookupRequest req;
  req.set_namespace_key(BytesOf(ns));
  req.mutable_tokens()->Add(tokens.begin(), tokens.end());
  v1::CacheLookupResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  RETURN_IF_ERROR(FromGrpcStatus(node.stub->Lookup(&ctx, req, &resp)));
  LookupMatch m;
  m.found = resp.found();
  if (m.found) {
    ASSIGN_OR_RETURN(m.key, Key16FromBytes(resp.state_key(), "state_key"));
  }
  m.token_count = resp.token_count();
  m.bytes = resp.bytes();
  m.pinned = resp.pinned();
  m.warm = resp.warm();
  return m;
}

absl::Status CacheClient::KeyCall(KeyMethod method, const kvstate::NamespaceKey& ns,
                                  const kvstate::StateKey& key, bool down_ok) {
  v1::CacheStateKeyRequest req;
  req.set_state_key(BytesOf(key));
  req.set_namespace_key(BytesOf(ns));
  ASSIGN_OR_RETURN(std::shared_ptr<const Nodes> nodes, Snapshot());
  bool done = false;
  absl::Status failed;
  for (const Node& node : nodes->nodes) {
    v1::CacheEmpty resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    const absl::Status st = FromGrpcStatus((node.stub.get()->*method)(&ctx, req, &resp));
    if (nodes->nodes.size() == 1) return st;
    if (st.ok()) {
      done = true;
    } else if (!absl::IsNotFound(st) && !(Suspect(node, st) && down_ok) && failed.ok()) {
      failed = absl::Status(st.code(), absl::StrCat(node.address, ": ", st.message()));
    }
  }
  if (!failed.ok()) return failed;
  return done ? absl::OkStatus() : absl::NotFoundError("no cache node holds the state");
}

absl::StatusOr<kvstate::Held> CacheClient::Holds(const std::string& node,
                                                 const kvstate::NamespaceKey& ns,
                                                 const kvstate::StateKey& key) {
  ASSIGN_OR_RETURN(std::shared_ptr<const Nodes> nodes, Snapshot());
  ASSIGN_OR_RETURN(const Node* target, Find(*nodes, node));
  v1::CacheStateKeyRequest req;
  req.set_state_key(BytesOf(key));
  req.set_namespace_key(BytesOf(ns));
  v1::CacheHasResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  RETURN_IF_ERROR(FromGrpcStatus(target->stub->Has(&ctx, req, &resp)));
  return kvstate::Held{resp.stored(), resp.deleted_unix_micros()};
}

absl::Status CacheClient::Pin(const kvstate::NamespaceKey& ns, const kvstate::StateKey& key) {
  return KeyCall(&v1::CacheNode::Stub::Pin, ns, key, /*down_ok=*/true);
}
absl::Status CacheClient::Unpin(const kvstate::NamespaceKey& ns, const kvstate::StateKey& key) {
  return KeyCall(&v1::CacheNode::Stub::Unpin, ns, key, /*down_ok=*/true);
}
absl::Status CacheClient::Delete(const kvstate::NamespaceKey& ns, const kvstate::StateKey& key) {
  return KeyCall(&v1::CacheNode::Stub::Delete, ns, key, /*down_ok=*/true);
}

absl::StatusOr<v1::CacheStatsResponse> CacheClient::Stats() {
  v1::CacheStatsRequest req;
  v1::CacheStatsResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  ASSIGN_OR_RETURN(std::shared_ptr<const Nodes> nodes, Snapshot());
  RETURN_IF_ERROR(FromGrpcStatus(nodes->nodes.front().stub->Stats(&ctx, req, &resp)));
  return resp;
}

}  // namespace glimpse::cache_client
