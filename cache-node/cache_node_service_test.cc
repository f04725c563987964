#include "cache-node/cache_node_service.h"

#include <atomic>
#include <filesystem>
#include <thread>

#include "core/common/status_macros.h"
#include "core/kvstate/test_state.h"
#include "core/kvstate/transfer_header.h"
#include "core/transport/loopback/loopback_transport.h"
#include "core/transport/testing/fixed_peers.h"
#include "gtest/gtest.h"

namespace glimpse::cache_node {
namespace {

using kvstate::testing::MakeTestState;
using kvstate::testing::MakeTestStateForTokens;
using kvstate::testing::TestModel;
using kvstate::testing::TestNamespace;
using kvstate::testing::TestState;
using kvstate::testing::TestStateShape;

class CacheNodeServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("cache_node_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    options_.storage.path = dir_.string();
    options_.storage.sync = false;  // unit tests: durability is the crash test's subject
    options_.retention_sweep_interval = absl::ZeroDuration();
    fabric_ = transport::NewLoopbackFabric();
    client_ = *transport::CreateLoopbackTransport(fabric_);
  }
  void TearDown() override {
    node_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Start() {
    node_.reset();
    auto t = transport::CreateLoopbackTransport(fabric_);
    ASSERT_TRUE(t.ok());
    auto n = CacheNodeService::Create(
        options_, transport::RestrictToPeers(*std::move(t), options_.peers), &clock_);
    ASSERT_TRUE(n.ok()) << n.status();
    node_ = *std::move(n);
    peer_.reset();
  }

  absl::StatusOr<CommitResult> Put(const TestState& s,
                                   std::vector<std::span<const uint8_t>> pages = {}) {
    auto ticket = node_->BeginPut(s.manifest, s.tokens, client_->LocalAddress());
    if (!ticket.ok()) return ticket.status();
    if (!peer_) {
      auto p = client_->Connect(ticket->transport_address);
      if (!p.ok()) return p.status();
      peer_ = *p;
    }
    if (pages.empty()) pages = s.spans();
    auto header = kvstate::EncodeBatchHeader(
        {kvstate::BatchKind::kPut, ticket->ticket, static_cast<uint32_t>(pages.size())});
    std::vector<std::span<const uint8_t>> bufs = {header};
    bufs.insert(bufs.end(), pages.begin(), pages.end());
    auto id = client_->Submit(*peer_, bufs);
    if (!id.ok()) return id.status();
    RETURN_IF_ERROR(client_->Wait(*id, absl::InfiniteFuture()));
    return node_->CommitPut(ticket->ticket, absl::Now() + absl::Seconds(10));
  }

  struct Fetched {
    GetResult result;
    std::vector<std::vector<uint8_t>> pages;
  };
  // A Get of `key` in `ns` (the test states' namespace unless told).
  absl::StatusOr<Fetched> Get(const kvstate::StateKey& key, const kvstate::Fingerprint& model,
                              std::vector<PageId> pages = {},
                              const NamespaceKey& ns = TestNamespace()) {
    GetRequest req{key, ns, model, std::move(pages), client_->LocalAddress(), ++request_id_};
    auto r = node_->Get(req, absl::Now() + absl::Seconds(10));
    if (!r.ok()) return r.status();
    auto batch = client_->Receive(absl::Now() + absl::Seconds(10));
    if (!batch.ok()) return batch.status();
    auto h = kvstate::DecodeBatchHeader(batch->buffers()[0]);
    EXPECT_TRUE(h.ok());
    EXPECT_EQ(h->id, request_id_);
    std::vector<uint32_t> sizes;
    for (const auto& p : r->manifest.pages) sizes.push_back(p.bytes);
    auto unpacked = kvstate::UnpackPages(
        *h, std::span<const std::span<const uint8_t>>(batch->buffers()).subspan(1), sizes);
    if (!unpacked.ok()) return unpacked.status();
    Fetched f{*std::move(r), {}};
    for (const auto& p : *unpacked) f.pages.emplace_back(p.begin(), p.end());
    return f;
  }

  // A batched get; the pages shipped for each item, in request order.
  struct FetchedMany {
    std::vector<GetResult> results;
    std::vector<std::vector<std::vector<uint8_t>>> pages;  // [item][page] bytes
    size_t buffers = 0;                                    // page buffers in the batch
  };
  absl::StatusOr<FetchedMany> GetMany(std::vector<GetItem> items) {
    GetManyRequest req{std::move(items), client_->LocalAddress(), ++request_id_};
    auto r = node_->GetMany(req, absl::Now() + absl::Seconds(10));
    if (!r.ok()) return r.status();
    auto batch = client_->Receive(absl::Now() + absl::Seconds(10));
    if (!batch.ok()) return batch.status();
    auto h = kvstate::DecodeBatchHeader(batch->buffers()[0]);
    if (!h.ok()) return h.status();
    EXPECT_EQ(h->id, request_id_);
    std::vector<uint32_t> sizes;
    for (const GetResult& one : *r) {
      for (const auto& p : one.manifest.pages) sizes.push_back(p.bytes);
    }
    const auto bufs = std::span<const std::span<const uint8_t>>(batch->buffers()).subspan(1);
    auto pages = kvstate::UnpackPages(*h, bufs, sizes);
    if (!pages.ok()) return pages.status();
    FetchedMany f{*std::move(r), {}, bufs.size()};
    size_t next = 0;
    for (const GetResult& one : f.results) {
      f.pages.emplace_back();
      for (size_t i = 0; i < one.manifest.pages.size(); ++i, ++next) {
        f.pages.back().emplace_back((*pages)[next].begin(), (*pages)[next].end());
      }
    }
    return f;
  }

  // No batch reaches the client.
  void ExpectNothingShipped() {
    EXPECT_EQ(client_->Receive(absl::Now() + absl::Milliseconds(50)).status().code(),
              absl::StatusCode::kDeadlineExceeded);
  }

  void ExpectState(const TestState& s) {
    auto f = Get(s.manifest.state_key, s.manifest.model);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_TRUE(f->result.manifest.SameContent(s.manifest));
    EXPECT_EQ(f->pages, s.pages);
  }

  static TestState State(uint64_t seed, TestStateShape shape = {}) {
    auto s = MakeTestState(TestNamespace(), TestModel(), shape, seed);
    EXPECT_TRUE(s.ok()) << s.status();
    return *std::move(s);
  }

  std::filesystem::path dir_;
  CacheNodeOptions options_;
  FakeClock clock_;
  std::shared_ptr<transport::LoopbackFabric> fabric_;
  std::unique_ptr<transport::Transport> client_;
  std::optional<transport::PeerId> peer_;
  std::unique_ptr<CacheNodeService> node_;
  uint64_t request_id_ = 0;
};

// Restricted to registered peers (options.peers, as glimpse-cache-node wires it), the node refuses
// a put from an unregistered sender at BeginPut and a get whose reply address is unregistered:
// nothing stored, nothing shipped. A registered client is served.
TEST_F(CacheNodeServiceTest, UnregisteredPeersAreRefusedBeforeAnythingMoves) {
  auto members = std::make_shared<transport::testing::FixedPeers>();
  members->Add(client_->LocalAddress());
  options_.peers = members;
  Start();
  std::unique_ptr<transport::Transport> outsider = *transport::CreateLoopbackTransport(fabric_);
  const TestState s = State(1);

  absl::StatusOr<PutTicket> refused =
      node_->BeginPut(s.manifest, s.tokens, outsider->LocalAddress());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("not a registered peer"), std::string::npos)
      << refused.status();
  EXPECT_EQ(node_->BeginPut(s.manifest, s.tokens).status().code(),
            absl::StatusCode::kPermissionDenied);  // no sender named
  EXPECT_EQ(node_->Stats().pending_puts, 0u);

  ASSERT_TRUE(Put(s).ok());
  GetRequest req{s.manifest.state_key,     s.manifest.namespace_key,
                 s.manifest.model,         {},
                 outsider->LocalAddress(), 7};
  EXPECT_EQ(node_->Get(req, absl::Now() + absl::Seconds(10)).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(outsider->Receive(absl::Now() + absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ExpectState(s);
  EXPECT_EQ(node_->Stats().transport.peers_refused, 1u);  // the get's Connect
}

// A put ticket is random and bound to the sender BeginPut named: another engine's batch for it
// is dropped, and CommitPut waits at most the ticket timeout (not its caller's far deadline) for
// pages that never come. The node goes on serving.
TEST_F(CacheNodeServiceTest, ATicketIsBoundToItsSenderAndHeldAtMostTheTicketTimeout) {
  options_.ticket_timeout = absl::Milliseconds(300);
  Start();
  const TestState s = State(7);
  auto ticket = node_->BeginPut(s.manifest, s.tokens, client_->LocalAddress());
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  auto next = node_->BeginPut(State(8).manifest, State(8).tokens, client_->LocalAddress());
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_NE(next->ticket, ticket->ticket + 1);  // not sequential (2^-64 odds of a false alarm)

  auto other = transport::CreateLoopbackTransport(fabric_);
  ASSERT_TRUE(other.ok());
  auto peer = (*other)->Connect(ticket->transport_address);
  ASSERT_TRUE(peer.ok());
  auto header = kvstate::EncodeBatchHeader(
      {kvstate::BatchKind::kPut, ticket->ticket, static_cast<uint32_t>(s.spans().size())});
  std::vector<std::span<const uint8_t>> bufs = {header};
  for (const auto& p : s.spans()) bufs.push_back(p);
  auto id = (*other)->Submit(*peer, bufs);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE((*other)->Wait(*id, absl::InfiniteFuture()).ok());

  const absl::StatusOr<CommitResult> hijacked =
      node_->CommitPut(ticket->ticket, absl::Now() + absl::Seconds(120));
  EXPECT_EQ(hijacked.status().code(), absl::StatusCode::kDeadlineExceeded) << hijacked.status();
  EXPECT_FALSE(Get(s.manifest.state_key, s.manifest.model).ok());  // nothing stored
  ASSERT_TRUE(Put(s).ok());  // from its own sender, the same state goes in
  ExpectState(s);
}

TEST_F(CacheNodeServiceTest, PutGetRoundTripWarmThenColdAfterRestart) {
  Start();
  TestState a = State(1), b = State(2);
  ASSERT_TRUE(Put(a).ok());
  ASSERT_TRUE(Put(b).ok());
  ExpectState(a);
  EXPECT_EQ(node_->Stats().warm.hits, 1u);
  Start();  // restart: cold reads, index rebuilt from the manifests
  EXPECT_EQ(node_->Stats().states, 2u);
  ExpectState(a);
  ExpectState(b);
  CacheNodeStats st = node_->Stats();
  EXPECT_EQ(st.warm.misses, 2u);
  EXPECT_EQ(st.gets, 2u);
  EXPECT_EQ(st.stored_bytes, a.manifest.total_page_bytes() + b.manifest.total_page_bytes());
  ExpectState(a);  // admitted to the warm tier by the cold read
  EXPECT_EQ(node_->Stats().warm.hits, 1u);
}

TEST_F(CacheNodeServiceTest, GetSelectedPagesInManifestOrder) {
  Start();
  TestState a = State(1);
  ASSERT_TRUE(Put(a).ok());
  Start();
  for (int round = 0; round < 2; ++round) {  // cold, then warm after a full read
    auto f = Get(a.manifest.state_key, a.manifest.model, {{1, 1, 1}, {0, 0, 1}});
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_EQ(f->pages.size(), 2u);
    EXPECT_EQ(f->pages[0], a.pages[1]);
    EXPECT_EQ(f->pages[1], a.pages[7]);
    EXPECT_EQ(f->result.manifest.pages[1], a.manifest.pages[7]);
    ExpectState(a);
  }
  auto missing = Get(a.manifest.state_key, a.manifest.model, {{5, 0, 0}});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
}

// Several states, cold and warm, whole and partial, one repeated: one request, one batch with one
// packed buffer per item, in request order; the cold whole states enter the warm tier.
TEST_F(CacheNodeServiceTest, GetManyShipsEveryStateInOneBatch) {
  Start();
  const TestState a = State(1), b = State(2), c = State(3);
  for (const TestState* s : {&a, &b, &c}) ASSERT_TRUE(Put(*s).ok());
  Start();         // all cold
  ExpectState(b);  // b warm
  auto f = GetMany(
      {{a.manifest.state_key, a.manifest.namespace_key, a.manifest.model, {}},
       {b.manifest.state_key, b.manifest.namespace_key, b.manifest.model, {}},
       {a.manifest.state_key, a.manifest.namespace_key, a.manifest.model, {{1, 1, 1}, {0, 0, 1}}},
       {c.manifest.state_key, c.manifest.namespace_key, c.manifest.model, {}}});
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->results.size(), 4u);
  EXPECT_EQ(f->buffers, 4u);
  EXPECT_TRUE(f->results[0].manifest.SameContent(a.manifest));
  EXPECT_EQ(f->pages[0], a.pages);
  EXPECT_EQ(f->pages[1], b.pages);
  EXPECT_EQ(f->pages[3], c.pages);
  ASSERT_EQ(f->pages[2].size(), 2u);
  EXPECT_EQ(f->pages[2][0], a.pages[1]);
  EXPECT_EQ(f->pages[2][1], a.pages[7]);
  EXPECT_EQ(f->results[2].manifest.pages[1], a.manifest.pages[7]);
  EXPECT_FALSE(f->results[0].warm_hit);
  EXPECT_TRUE(f->results[1].warm_hit);
  EXPECT_FALSE(f->results[2].warm_hit);  // a enters the warm tier once the batch is shipped
  EXPECT_FALSE(f->results[3].warm_hit);
  CacheNodeStats st = node_->Stats();
  EXPECT_EQ(st.gets, 5u);
  EXPECT_EQ(st.warm.entries, 3u);
  EXPECT_EQ(st.bytes_got, a.manifest.total_page_bytes() + 2 * b.manifest.total_page_bytes() +
                              c.manifest.total_page_bytes() + a.pages[1].size() +
                              a.pages[7].size());
  f = GetMany({{c.manifest.state_key, c.manifest.namespace_key, c.manifest.model, {}},
               {a.manifest.state_key, a.manifest.namespace_key, a.manifest.model, {}}});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->results[0].warm_hit);
  EXPECT_TRUE(f->results[1].warm_hit);
  EXPECT_EQ(f->pages[0], c.pages);
  EXPECT_EQ(f->pages[1], a.pages);
}

// Every bad batched get fails as a whole with a clear status naming the item, ships nothing and
// changes nothing (not even the warm tier).
TEST_F(CacheNodeServiceTest, BadGetManyShipsNothing) {
  const TestState a = State(1), b = State(2), unknown = State(3);
  options_.limits.max_state_bytes = a.manifest.total_page_bytes() * 3 / 2;
  Start();
  ASSERT_TRUE(Put(a).ok());
  ASSERT_TRUE(Put(b).ok());
  Start();  // cold: a failed request must not admit anything
  const GetItem ga{a.manifest.state_key, a.manifest.namespace_key, a.manifest.model, {}};
  const GetItem gb{b.manifest.state_key, b.manifest.namespace_key, b.manifest.model, {}};
  struct Case {
    std::vector<GetItem> items;
    absl::StatusCode code;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{}, absl::StatusCode::kInvalidArgument, "1 to 1024 states, not 0"},
      {std::vector<GetItem>(kMaxGetItems + 1, ga), absl::StatusCode::kInvalidArgument, "not 1025"},
      {{ga, {unknown.manifest.state_key, unknown.manifest.namespace_key, a.manifest.model, {}}},
       absl::StatusCode::kNotFound,
       "get item 1: no state stored under key " + kvpage::ToHex(unknown.manifest.state_key)},
      {{gb, {b.manifest.state_key, b.manifest.namespace_key, TestModel(3), {}}},
       absl::StatusCode::kFailedPrecondition,
       "get item 1: state " + kvpage::ToHex(b.manifest.state_key)},
      {{{a.manifest.state_key, a.manifest.namespace_key, a.manifest.model, {{5, 0, 0}}}, gb},
       absl::StatusCode::kInvalidArgument,
       "get item 0: state"},
      {{ga, ga}, absl::StatusCode::kInvalidArgument, "split the request"},
  };
  for (const Case& c : cases) {
    auto f = GetMany(c.items);
    ASSERT_EQ(f.status().code(), c.code) << f.status();
    EXPECT_NE(f.status().message().find(c.want), std::string::npos) << f.status();
    ExpectNothingShipped();
  }
  GetManyRequest no_address{{ga}, "", 1};
  EXPECT_EQ(node_->GetMany(no_address, absl::Now() + absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  ExpectNothingShipped();
  CacheNodeStats st = node_->Stats();
  EXPECT_EQ(st.gets, 0u);
  EXPECT_EQ(st.warm.entries, 0u);
  EXPECT_EQ(st.states, 2u);
  EXPECT_EQ(st.errors[static_cast<size_t>(Method::kGetMany)]
                     [static_cast<size_t>(absl::StatusCode::kInvalidArgument)],
            5u);
  // Within the byte limit the same states are fine.
  auto ok = GetMany({ga});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->pages[0], a.pages);
  ExpectState(b);
}

TEST_F(CacheNodeServiceTest, DuplicatePutIsIdempotentDifferentPayloadIsAlreadyExists) {
  Start();
  TestState a = State(1);
  ASSERT_TRUE(Put(a).ok());
  auto again = Put(a);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->already_stored);
  auto same_key = MakeTestStateForTokens(TestNamespace(), TestModel(), {}, a.tokens, /*seed=*/99);
  ASSERT_TRUE(same_key.ok());
  auto dup = Put(*same_key);
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(dup.status().message().find("different payload"), std::string::npos);
  ExpectState(a);
  EXPECT_EQ(node_->Stats().duplicate_puts, 1u);
}

TEST_F(CacheNodeServiceTest, BadPutsStoreNothing) {
  Start();
  TestState a = State(1);
  // Tokens that do not hash to the key.
  auto wrong_tokens = a.tokens;
  wrong_tokens[0] += 1;
  EXPECT_EQ(node_->BeginPut(a.manifest, wrong_tokens).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A corrupted page: DataLoss at commit.
  std::vector<uint8_t> bad = a.pages[2];
  bad[100] ^= 1;
  auto spans = a.spans();
  spans[2] = bad;
  EXPECT_EQ(Put(a, spans).status().code(), absl::StatusCode::kDataLoss);
  // Too few pages.
  spans = a.spans();
  spans.pop_back();
  EXPECT_EQ(Put(a, spans).status().code(), absl::StatusCode::kInvalidArgument);
  // Pages of another model under this manifest: FailedPrecondition.
  auto other_model = MakeTestStateForTokens(TestNamespace(), TestModel(5), {}, a.tokens, 1);
  ASSERT_TRUE(other_model.ok());
  EXPECT_EQ(Put(a, other_model->spans()).status().code(), absl::StatusCode::kFailedPrecondition);
  // Unknown ticket.
  EXPECT_EQ(node_->CommitPut(12345, absl::Now()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(node_->Stats().states, 0u);
  EXPECT_EQ(Get(a.manifest.state_key, a.manifest.model).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(Put(a).ok());
  CacheNodeStats st = node_->Stats();
  EXPECT_EQ(st.errors[static_cast<size_t>(Method::kCommitPut)]
                     [static_cast<size_t>(absl::StatusCode::kDataLoss)],
            1u);
}

TEST_F(CacheNodeServiceTest, WrongFingerprintNamesBoth) {
  Start();
  TestState a = State(1);
  ASSERT_TRUE(Put(a).ok());
  for (int round = 0; round < 2; ++round) {  // warm, then cold
    auto f = Get(a.manifest.state_key, TestModel(3));
    ASSERT_EQ(f.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(f.status().message().find(kvpage::ToHex(TestModel(3))), std::string::npos);
    EXPECT_NE(f.status().message().find(kvpage::ToHex(TestModel(1))), std::string::npos);
    Start();
  }
}

TEST_F(CacheNodeServiceTest, LookupFindsLongestStoredPrefix) {
  Start();
  TestStateShape shape;
  shape.pages_per_head = 4;  // 64 tokens
  TestState full = State(1, shape);
  shape.pages_per_head = 2;  // its first 32 tokens
  auto half = MakeTestStateForTokens(
      TestNamespace(), TestModel(), shape,
      std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + 32), 2);
  ASSERT_TRUE(half.ok());
  ASSERT_TRUE(Put(*half).ok());
  std::vector<int32_t> query = full.tokens;
  query.push_back(7);
  auto r = node_->Lookup(TestNamespace(), query);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->found);
  EXPECT_EQ(r->token_count, 32u);
  ASSERT_TRUE(Put(full).ok());
  Start();  // the index survives a restart
  r = node_->Lookup(TestNamespace(), query);
  ASSERT_TRUE(r.ok() && r->found);
  EXPECT_EQ(r->token_count, 64u);
  EXPECT_EQ(r->key, full.manifest.state_key);
  r = node_->Lookup(TestNamespace(2), query);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->found);
}

TEST_F(CacheNodeServiceTest, PinDeleteAndRetention) {
  TestState a = State(1), b = State(2), c = State(3);
  options_.retention.max_bytes = 2 * a.manifest.total_page_bytes() + 10;
  options_.retention.max_age = absl::Hours(1);
  Start();
  ASSERT_TRUE(Put(a).ok());
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(Put(b).ok());
  ASSERT_TRUE(node_->Pin(a.manifest.namespace_key, a.manifest.state_key).ok());
  EXPECT_EQ(node_->Delete(a.manifest.namespace_key, a.manifest.state_key).code(),
            absl::StatusCode::kFailedPrecondition);
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(Put(c).ok());  // displaces b, the oldest unpinned
  EXPECT_EQ(Get(b.manifest.state_key, b.manifest.model).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(node_->Pin(c.manifest.namespace_key, c.manifest.state_key).ok());
  Start();  // pins survive a restart
  auto full = Put(b);
  ASSERT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("pinned"), std::string::npos) << full.status();
  ExpectState(a);
  ExpectState(c);
  ASSERT_TRUE(node_->Unpin(c.manifest.namespace_key, c.manifest.state_key).ok());
  ASSERT_TRUE(node_->Delete(c.manifest.namespace_key, c.manifest.state_key).ok());
  EXPECT_EQ(node_->Delete(c.manifest.namespace_key, c.manifest.state_key).code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(Put(b).ok());
  // Age: two hours later b is dropped, pinned a stays.
  clock_.Advance(absl::Hours(2));
  ASSERT_TRUE(node_->RunRetention().ok());
  EXPECT_EQ(node_->Stats().states, 1u);
  ExpectState(a);
}

// A delete on request leaves a tombstone (persisted) that refuses a replication copy made before
// it, not one made after; storing the state again clears it; it expires after tombstone_ttl.
// Replication's own drops (DropCopy) leave none.
TEST_F(CacheNodeServiceTest, ADeleteLeavesATombstoneThatRefusesOlderCopies) {
  TestState a = State(1), b = State(2);
  options_.tombstone_ttl = absl::Hours(1);
  Start();
  const NamespaceKey& ns = a.manifest.namespace_key;
  const kvstate::StateKey& key = a.manifest.state_key;
  ASSERT_TRUE(Put(a).ok());
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(node_->Delete(ns, key).ok());
  const int64_t deleted = absl::ToUnixMicros(clock_.Now());
  EXPECT_FALSE(node_->Holds(ns, key).stored);
  EXPECT_EQ(node_->Holds(ns, key).deleted_unix_micros, deleted);
  kvstate::Manifest copy = a.manifest;
  copy.created_unix_micros = deleted - 1;  // made before the delete: refused
  auto refused = node_->BeginPut(copy, {}, client_->LocalAddress(), /*copy=*/true);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  copy.created_unix_micros = deleted + 1;  // made after it (stored again elsewhere): taken
  EXPECT_TRUE(node_->BeginPut(copy, {}, client_->LocalAddress(), /*copy=*/true).ok());
  // A node that does not hold the state keeps a tombstone too (still NotFound), and a copy begun
  // before the delete is refused at its commit.
  const kvstate::StateKey& other = b.manifest.state_key;
  kvstate::Manifest in_flight = b.manifest;
  in_flight.created_unix_micros = deleted;
  auto ticket = node_->BeginPut(in_flight, {}, client_->LocalAddress(), /*copy=*/true);
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(node_->Delete(ns, other).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(node_->Holds(ns, other).deleted_unix_micros, absl::ToUnixMicros(clock_.Now()));
  auto peer = client_->Connect(ticket->transport_address);
  ASSERT_TRUE(peer.ok());
  auto header = kvstate::EncodeBatchHeader(
      {kvstate::BatchKind::kPut, ticket->ticket, static_cast<uint32_t>(b.pages.size())});
  std::vector<std::span<const uint8_t>> bufs = {header};
  for (const auto& p : b.spans()) bufs.push_back(p);
  auto id = client_->Submit(*peer, bufs);
  ASSERT_TRUE(id.ok() && client_->Wait(*id, absl::InfiniteFuture()).ok());
  EXPECT_EQ(node_->CommitPut(ticket->ticket, absl::Now() + absl::Seconds(10)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(node_->Holds(ns, other).stored);
  // Without replication (no tombstone_ttl) a delete leaves none.
  options_.tombstone_ttl = absl::ZeroDuration();
  Start();
  ASSERT_TRUE(Put(b).ok());
  ASSERT_TRUE(node_->Delete(ns, other).ok());
  EXPECT_EQ(node_->Holds(ns, other).deleted_unix_micros, 0);
  options_.tombstone_ttl = absl::Hours(1);
  Start();  // the tombstone is on disk
  EXPECT_EQ(node_->Holds(ns, key).deleted_unix_micros, deleted);
  ASSERT_TRUE(Put(a).ok());  // a put of the state clears it
  EXPECT_TRUE(node_->Holds(ns, key).stored);
  EXPECT_EQ(node_->Holds(ns, key).deleted_unix_micros, 0);
  ASSERT_TRUE(node_->Delete(ns, key).ok());
  clock_.Advance(absl::Hours(1) + absl::Seconds(1));
  ASSERT_TRUE(node_->RunRetention().ok());
  EXPECT_EQ(node_->Holds(ns, key).deleted_unix_micros, 0);
  Start();
  EXPECT_EQ(node_->Holds(ns, key).deleted_unix_micros, 0);
  ASSERT_TRUE(Put(b).ok());
  ASSERT_TRUE(node_->DropCopy(b.manifest.namespace_key, b.manifest.state_key).ok());
  EXPECT_EQ(node_->Holds(b.manifest.namespace_key, b.manifest.state_key).deleted_unix_micros, 0);
}

// A state is named by its key and its namespace: under another namespace a stored key answers
// exactly as an unknown key does, for every read, pin and delete, warm or cold.
TEST_F(CacheNodeServiceTest, AKeyAloneIsNotEnough) {
  TestState a = State(1);
  Start();
  ASSERT_TRUE(Put(a).ok());
  const NamespaceKey other = TestNamespace(9);
  const std::string unknown = "no state stored under key " + kvpage::ToHex(a.manifest.state_key);
  auto expect_unknown = [&](const absl::Status& s, const char* what) {
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << what << ": " << s;
    EXPECT_NE(s.message().find(unknown), std::string::npos) << what << ": " << s;
  };
  for (int round = 0; round < 2; ++round) {  // cold, then warm (the first good Get admits it)
    expect_unknown(Get(a.manifest.state_key, a.manifest.model, {}, other).status(), "get");
    expect_unknown(GetMany({{a.manifest.state_key, other, a.manifest.model, {}}}).status(),
                   "get many");
    expect_unknown(node_->Pin(other, a.manifest.state_key), "pin");
    expect_unknown(node_->Unpin(other, a.manifest.state_key), "unpin");
    expect_unknown(node_->Delete(other, a.manifest.state_key), "delete");
    ExpectState(a);  // its own namespace reads it, and nothing above changed it
  }
  EXPECT_EQ(node_->Stats().pinned_states, 0u);
}

// Pins have a quota per namespace (a tenant's states under one model and policy): one namespace
// pinning up to it does not stop another from pinning; unpinning makes room again; re-pinning a
// pinned state is free.
TEST_F(CacheNodeServiceTest, PinsStayWithinTheirNamespacesQuota) {
  TestState a = State(1), b = State(2);
  auto other = MakeTestState(TestNamespace(7), TestModel(), {}, 3);
  ASSERT_TRUE(other.ok()) << other.status();
  options_.max_pinned_bytes_per_namespace = a.manifest.total_page_bytes() + 10;  // one state
  Start();
  ASSERT_TRUE(Put(a).ok());
  ASSERT_TRUE(Put(b).ok());
  ASSERT_TRUE(Put(*other).ok());
  ASSERT_TRUE(node_->Pin(a.manifest.namespace_key, a.manifest.state_key).ok());
  ASSERT_TRUE(node_->Pin(a.manifest.namespace_key, a.manifest.state_key)
                  .ok());  // already pinned: nothing more counted
  const absl::Status over = node_->Pin(b.manifest.namespace_key, b.manifest.state_key);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("pin.max_bytes_per_namespace"), std::string::npos) << over;
  EXPECT_TRUE(node_->Pin(other->manifest.namespace_key, other->manifest.state_key)
                  .ok());  // another namespace's quota
  EXPECT_EQ(node_->Stats().pinned_states, 2u);
  ASSERT_TRUE(node_->Unpin(a.manifest.namespace_key, a.manifest.state_key).ok());
  EXPECT_TRUE(node_->Pin(b.manifest.namespace_key, b.manifest.state_key).ok());
  Start();  // the counts come back with the pins after a restart
  EXPECT_EQ(node_->Pin(a.manifest.namespace_key, a.manifest.state_key).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(CacheNodeServiceTest, WarmTierHonoursBudget) {
  TestState a = State(1);
  options_.warm_bytes = a.manifest.total_page_bytes() - 1;  // nothing fits
  Start();
  ASSERT_TRUE(Put(a).ok());
  ExpectState(a);
  CacheNodeStats st = node_->Stats();
  EXPECT_EQ(st.warm.bytes, 0u);
  EXPECT_EQ(st.warm.misses, 1u);
}

TEST_F(CacheNodeServiceTest, PinnedStateStaysWarm) {
  TestState a = State(1), b = State(2);
  options_.warm_bytes = a.manifest.total_page_bytes() + 10;  // room for one state
  Start();
  ASSERT_TRUE(Put(a).ok());
  ASSERT_TRUE(node_->Pin(a.manifest.namespace_key, a.manifest.state_key).ok());
  clock_.Advance(absl::Hours(1));  // a's recency score has decayed to nothing
  ASSERT_TRUE(Put(b).ok());        // would displace an unpinned a
  ExpectState(b);                  // cold read, not admitted over the pinned a
  ExpectState(a);
  CacheNodeStats st = node_->Stats();
  EXPECT_EQ(st.warm.hits, 1u);
  EXPECT_EQ(st.warm.misses, 1u);
  EXPECT_EQ(st.warm.pinned_entries, 1u);
  ASSERT_TRUE(node_->Unpin(a.manifest.namespace_key, a.manifest.state_key).ok());
  ExpectState(b);  // now b (fresh) displaces the idle a
  ExpectState(b);
  EXPECT_EQ(node_->Stats().warm.hits, 2u);
}

// Several threads, each with its own transport, put, get, look up and delete their own states
// while sharing the node (a third of them deleted again). Afterwards (and after a
// restart) exactly the expected states are stored, each intact.
TEST_F(CacheNodeServiceTest, ConcurrentClients) {
  constexpr int kThreads = 4, kStatesPerThread = 12;
  options_.warm_bytes = 3 * State(1).manifest.total_page_bytes();  // warm hits and misses
  Start();
  std::vector<std::vector<uint64_t>> kept(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto tr = transport::CreateLoopbackTransport(fabric_);
      auto peer = (*tr)->Connect(node_->transport_address());
      const auto check = [&](bool ok, const std::string& what) {
        if (!ok) {
          failures.fetch_add(1);
          ADD_FAILURE() << "thread " << t << ": " << what;
        }
      };
      for (int i = 0; i < kStatesPerThread; ++i) {
        const uint64_t seed = 1000 * (t + 1) + i;
        const TestState s = State(seed);
        auto ticket = node_->BeginPut(s.manifest, s.tokens);
        check(ticket.ok(), ticket.status().ToString());
        if (!ticket.ok()) continue;
        std::vector<uint8_t> packed;
        for (const auto& p : s.pages) packed.insert(packed.end(), p.begin(), p.end());
        const auto header = kvstate::EncodeBatchHeader({kvstate::BatchKind::kPut, ticket->ticket,
                                                        static_cast<uint32_t>(s.pages.size()),
                                                        kvstate::BatchHeader::kPacked});
        const std::span<const uint8_t> bufs[] = {header, packed};
        auto id = (*tr)->Submit(*peer, bufs);
        check(id.ok() && (*tr)->Wait(*id, absl::InfiniteFuture()).ok(), "submit");
        auto commit = node_->CommitPut(ticket->ticket, absl::Now() + absl::Seconds(10));
        check(commit.ok(), commit.status().ToString());
        const uint64_t rid = (static_cast<uint64_t>(t) << 32) | static_cast<uint64_t>(i);
        auto got = node_->Get({s.manifest.state_key,
                               s.manifest.namespace_key,
                               s.manifest.model,
                               {},
                               (*tr)->LocalAddress(),
                               rid},
                              absl::Now() + absl::Seconds(10));
        check(got.ok(), got.status().ToString());
        auto batch = (*tr)->Receive(absl::Now() + absl::Seconds(10));
        check(batch.ok(), "reply batch");
        if (batch.ok()) {
          std::vector<uint32_t> sizes;
          for (const auto& p : s.manifest.pages) sizes.push_back(p.bytes);
          auto h = kvstate::DecodeBatchHeader(batch->buffers()[0]);
          auto pages = kvstate::UnpackPages(
              *h, std::span<const std::span<const uint8_t>>(batch->buffers()).subspan(1), sizes);
          check(pages.ok(), "unpack");
          for (size_t k = 0; pages.ok() && k < s.pages.size(); ++k) {
            check(std::equal(s.pages[k].begin(), s.pages[k].end(), (*pages)[k].begin(),
                             (*pages)[k].end()),
                  "get bytes");
          }
        }
        auto found = node_->Lookup(TestNamespace(), s.tokens);
        check(found.ok() && found->found && found->key == s.manifest.state_key, "lookup");
        if (i % 3 == 0) {
          check(node_->Delete(s.manifest.namespace_key, s.manifest.state_key).ok(), "delete");
        } else {
          kept[t].push_back(seed);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(failures.load(), 0);
  size_t expected = 0;
  for (const auto& k : kept) expected += k.size();
  EXPECT_EQ(node_->Stats().states, expected);
  Start();
  EXPECT_EQ(node_->Stats().states, expected);
  for (const auto& k : kept) {
    for (uint64_t seed : k) ExpectState(State(seed));
  }
}

}  // namespace
}  // namespace glimpse::cache_node
