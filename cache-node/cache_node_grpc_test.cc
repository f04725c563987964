// The cache node behind a real in-process gRPC server (GrpcServer), driven by the client library
// and, for malformed messages the library would never send, by the raw stub. Bad input gets a
// clear status and leaves the stored data unchanged (checked after every case).
#include "cache-node/cache_node_grpc.h"

#include <filesystem>

#include "core/cache_client/cache_client.h"
#include "core/cache_client/proto_convert.h"
#include "core/common/grpc/server.h"
#include "core/common/grpc/status.h"
#include "core/common/grpc/testdata/test_services.h"
#include "core/kvstate/test_state.h"
#include "core/transport/loopback/loopback_transport.h"
#include "gtest/gtest.h"

namespace glimpse::cache_node {
namespace {

using cache_client::CacheClient;
using kvstate::testing::MakeTestState;
using kvstate::testing::MakeTestStateForTokens;
using kvstate::testing::TestModel;
using kvstate::testing::TestNamespace;
using kvstate::testing::TestState;

constexpr int64_t kMaxMessage = 256 << 10;

class CacheNodeGrpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("cache_node_grpc_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    StartServer();
    a_ = State(1);
    ASSERT_TRUE(client_->Put(a_.manifest, a_.tokens, a_.spans()).ok());
  }
  // The node over dir_, its gRPC server, a client and a raw stub.
  void StartServer() {
    CacheNodeOptions o;
    o.storage.path = dir_.string();
    o.storage.sync = false;
    o.retention_sweep_interval = absl::ZeroDuration();
    o.limits.max_state_bytes = 1 << 20;
    fabric_ = transport::NewLoopbackFabric();
    auto node = CacheNodeService::Create(o, *transport::CreateLoopbackTransport(fabric_), &clock_);
    ASSERT_TRUE(node.ok()) << node.status();
    service_ = *std::move(node);
    adapter_ = std::make_unique<CacheNodeGrpc>(service_.get());
    GrpcServerOptions so;
    so.max_receive_message_bytes = kMaxMessage;
    auto server = GrpcServer::Start(so, {adapter_.get()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    address_ = "127.0.0.1:" + std::to_string(server_->port());
    std::vector<std::unique_ptr<transport::Transport>> transports;
    transports.push_back(*transport::CreateLoopbackTransport(fabric_));
    auto client = CacheClient::Create({{address_}, {}, absl::Seconds(10)}, std::move(transports));
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    auto channel = ClientChannel(address_);
    ASSERT_TRUE(channel.ok());
    channel_ = *channel;
    stub_ = v1::CacheNode::NewStub(channel_);
  }
  void StopServer() {
    client_.reset();
    server_.reset();
    service_.reset();
  }
  void TearDown() override {
    StopServer();
    std::filesystem::remove_all(dir_);
  }

  static TestState State(uint64_t seed) {
    auto s = MakeTestState(TestNamespace(), TestModel(), {}, seed);
    EXPECT_TRUE(s.ok()) << s.status();
    return *std::move(s);
  }

  // The stored data is exactly `a_`: one state, its bytes, its pages.
  void ExpectUnchanged() {
    auto stats = client_->Stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->states(), 1u);
    EXPECT_EQ(stats->stored_bytes(), a_.manifest.total_page_bytes());
    EXPECT_EQ(stats->pinned_states(), 0u);
    auto got = client_->Get(a_.manifest.namespace_key, a_.manifest.state_key, a_.manifest.model);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(got->manifest.SameContent(a_.manifest));
    ASSERT_EQ(got->pages.size(), a_.pages.size());
    for (size_t i = 0; i < a_.pages.size(); ++i) {
      EXPECT_TRUE(std::equal(got->pages[i].begin(), got->pages[i].end(), a_.pages[i].begin(),
                             a_.pages[i].end()));
    }
  }

  grpc::Status RawBeginPut(const v1::CacheBeginPutRequest& req) {
    grpc::ClientContext ctx;
    v1::CacheBeginPutResponse resp;
    return stub_->BeginPut(grpctest::WithDeadline(ctx), req, &resp);
  }
  v1::CacheBeginPutRequest BeginPutOf(const TestState& s) {
    v1::CacheBeginPutRequest req;
    cache_client::ManifestToProto(s.manifest, req.mutable_manifest());
    req.mutable_tokens()->Add(s.tokens.begin(), s.tokens.end());
    return req;
  }

  std::filesystem::path dir_;
  FakeClock clock_;
  std::shared_ptr<transport::LoopbackFabric> fabric_;
  std::unique_ptr<CacheNodeService> service_;
  std::unique_ptr<CacheNodeGrpc> adapter_;
  std::unique_ptr<GrpcServer> server_;
  std::string address_;
  std::unique_ptr<CacheClient> client_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::CacheNode::Stub> stub_;
  TestState a_;
};

TEST_F(CacheNodeGrpcTest, ClientRoundTripAndHealth) {
  EXPECT_EQ(grpctest::CheckHealth(channel_, "").value(),
            grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(grpctest::CheckHealth(channel_, "glimpse.v1.CacheNode").value(),
            grpc::health::v1::HealthCheckResponse::SERVING);
  ExpectUnchanged();
  auto again = client_->Put(a_.manifest, a_.tokens, a_.spans());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->already_stored);
  auto sel = client_->Get(a_.manifest.namespace_key, a_.manifest.state_key, a_.manifest.model,
                          {{1, 0, 1}});
  ASSERT_TRUE(sel.ok()) << sel.status();
  ASSERT_EQ(sel->pages.size(), 1u);
  EXPECT_EQ(sel->manifest.pages[0], a_.manifest.pages[5]);
  EXPECT_TRUE(sel->warm_hit);
  std::vector<int32_t> query = a_.tokens;
  query.push_back(1);
  auto m = client_->Lookup(TestNamespace(), query);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->found);
  EXPECT_EQ(m->key, a_.manifest.state_key);
  EXPECT_EQ(m->token_count, a_.tokens.size());
  EXPECT_TRUE(m->warm);
  ASSERT_TRUE(client_->Pin(a_.manifest.namespace_key, a_.manifest.state_key).ok());
  EXPECT_EQ(client_->Delete(a_.manifest.namespace_key, a_.manifest.state_key).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(client_->Unpin(a_.manifest.namespace_key, a_.manifest.state_key).ok());
  ASSERT_TRUE(client_->Delete(a_.manifest.namespace_key, a_.manifest.state_key).ok());
  EXPECT_FALSE(client_->Lookup(TestNamespace(), query)->found);
}

TEST_F(CacheNodeGrpcTest, GetManyThroughTheClient) {
  const TestState b = State(2);
  ASSERT_TRUE(client_->Put(b.manifest, b.tokens, b.spans()).ok());
  const std::vector<cache_client::GetSpec> specs = {
      {a_.manifest.namespace_key, a_.manifest.state_key, a_.manifest.model, {}},
      {b.manifest.namespace_key, b.manifest.state_key, b.manifest.model, {{1, 0, 1}}},
      {a_.manifest.namespace_key, a_.manifest.state_key, a_.manifest.model, {}}};
  auto got = client_->GetMany(specs);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 3u);
  for (size_t k : {0u, 2u}) {
    const cache_client::State& s = (*got)[k];
    EXPECT_TRUE(s.manifest.SameContent(a_.manifest));
    ASSERT_EQ(s.pages.size(), a_.pages.size());
    for (size_t i = 0; i < a_.pages.size(); ++i) {
      EXPECT_TRUE(
          std::equal(s.pages[i].begin(), s.pages[i].end(), a_.pages[i].begin(), a_.pages[i].end()));
    }
  }
  ASSERT_EQ((*got)[1].pages.size(), 1u);
  EXPECT_EQ((*got)[1].manifest.pages[0], b.manifest.pages[5]);
  EXPECT_TRUE(std::equal((*got)[1].pages[0].begin(), (*got)[1].pages[0].end(), b.pages[5].begin(),
                         b.pages[5].end()));
  EXPECT_EQ((*got)[0].batch, (*got)[1].batch);  // one transfer
  ASSERT_TRUE(client_->Delete(b.manifest.namespace_key, b.manifest.state_key).ok());
  ExpectUnchanged();
}

TEST_F(CacheNodeGrpcTest, BadGetManyIsRefusedAndChangesNothing) {
  const TestState b = State(2);
  auto got = client_->GetMany(std::vector<cache_client::GetSpec>{
      {a_.manifest.namespace_key, a_.manifest.state_key, a_.manifest.model, {}},
      {b.manifest.namespace_key, b.manifest.state_key, b.manifest.model, {}}});
  ASSERT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
  EXPECT_NE(got.status().message().find("get item 1: no state stored under key " +
                                        kvpage::ToHex(b.manifest.state_key)),
            std::string::npos)
      << got.status();
  EXPECT_EQ(client_->GetMany({}).status().code(), absl::StatusCode::kInvalidArgument);
  // Malformed messages the client would never send.
  v1::CacheGetManyRequest req;
  v1::CacheGetItem* good = req.add_items();
  good->set_state_key(cache_client::BytesOf(a_.manifest.state_key));
  good->set_namespace_key(cache_client::BytesOf(a_.manifest.namespace_key));
  good->mutable_expected_model()->set_digest(cache_client::BytesOf(a_.manifest.model));
  *req.add_items() = *good;
  req.mutable_items(1)->mutable_state_key()->pop_back();
  req.set_reply_address("nowhere");
  v1::CacheGetManyResponse resp;
  {
    grpc::ClientContext ctx;
    grpc::Status g = stub_->GetMany(grpctest::WithDeadline(ctx), req, &resp);
    EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << g.error_message();
    EXPECT_NE(g.error_message().find("items[1].state_key is 15 bytes"), std::string::npos)
        << g.error_message();
  }
  req.mutable_items()->RemoveLast();
  req.clear_reply_address();
  {
    grpc::ClientContext ctx;
    grpc::Status g = stub_->GetMany(grpctest::WithDeadline(ctx), req, &resp);
    EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << g.error_message();
    EXPECT_NE(g.error_message().find("reply address"), std::string::npos) << g.error_message();
  }
  ExpectUnchanged();
}

// The node does not recompute page CRC32Cs on a read (cache_node_service.h): a page whose bytes
// changed after its put was verified (here written straight into RocksDB, valid block checksums
// and all) reaches the client, which refuses it with DATA_LOSS, for Get and GetMany alike.
TEST_F(CacheNodeGrpcTest, CorruptStoredPageIsDataLossAtTheClient) {
  const TestState b = State(2);
  StopServer();
  {
    PageStoreOptions po;
    po.path = dir_.string();
    po.sync = false;
    auto store = PageStore::Open(po);
    ASSERT_TRUE(store.ok()) << store.status();
    std::vector<uint8_t> bad = b.pages[6];
    bad[bad.size() / 2] ^= 0x08;
    auto spans = b.spans();
    spans[6] = bad;
    ASSERT_TRUE((*store)->Commit(b.manifest, spans, {}).ok());
  }
  StartServer();
  for (int round = 0; round < 2; ++round) {  // cold, then from the warm tier
    absl::Status s =
        client_->Get(b.manifest.namespace_key, b.manifest.state_key, b.manifest.model).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find("CRC32C mismatch"), std::string::npos) << s;
    s = client_
            ->GetMany(std::vector<cache_client::GetSpec>{
                {a_.manifest.namespace_key, a_.manifest.state_key, a_.manifest.model, {}},
                {b.manifest.namespace_key, b.manifest.state_key, b.manifest.model, {}}})
            .status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  }
  auto other_pages =
      client_->Get(b.manifest.namespace_key, b.manifest.state_key, b.manifest.model, {{0, 0, 0}});
  EXPECT_TRUE(other_pages.ok()) << other_pages.status();
}

TEST_F(CacheNodeGrpcTest, UnknownStateIsNotFound) {
  TestState b = State(2);
  for (absl::Status s :
       {client_->Get(b.manifest.namespace_key, b.manifest.state_key, b.manifest.model).status(),
        client_->Pin(b.manifest.namespace_key, b.manifest.state_key),
        client_->Unpin(b.manifest.namespace_key, b.manifest.state_key),
        client_->Delete(b.manifest.namespace_key, b.manifest.state_key)}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    EXPECT_NE(s.message().find(kvpage::ToHex(b.manifest.state_key)), std::string::npos) << s;
  }
  ExpectUnchanged();
}

TEST_F(CacheNodeGrpcTest, WrongFingerprintIsFailedPreconditionNamingBoth) {
  auto got = client_->Get(a_.manifest.namespace_key, a_.manifest.state_key, TestModel(7));
  ASSERT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition) << got.status();
  EXPECT_NE(got.status().message().find(kvpage::ToHex(TestModel(7))), std::string::npos);
  EXPECT_NE(got.status().message().find(kvpage::ToHex(TestModel(1))), std::string::npos);
  // A put whose pages were made by another model than its manifest says.
  TestState b = State(2);
  auto other = MakeTestStateForTokens(TestNamespace(), TestModel(7), {}, b.tokens, 2);
  ASSERT_TRUE(other.ok());
  absl::Status s = client_->Put(b.manifest, b.tokens, other->spans()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  ExpectUnchanged();
}

TEST_F(CacheNodeGrpcTest, OversizedRequestsAreRefused) {
  // Over the gRPC message limit: gRPC's own RESOURCE_EXHAUSTED, never reaching the service.
  v1::CacheBeginPutRequest big = BeginPutOf(State(2));
  for (int i = 0; i < kMaxMessage / 4 + 16; ++i) big.add_tokens(1 << 29);  // 5-byte varints
  grpc::Status g = RawBeginPut(big);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << g.error_message();
  // Over put.max_state_bytes (1 MiB here): INVALID_ARGUMENT naming the limit.
  v1::CacheBeginPutRequest huge = BeginPutOf(State(2));
  huge.mutable_manifest()->mutable_pages(0)->set_bytes(2 << 20);
  g = RawBeginPut(huge);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << g.error_message();
  EXPECT_NE(g.error_message().find("1048576"), std::string::npos) << g.error_message();
  ExpectUnchanged();
}

TEST_F(CacheNodeGrpcTest, MalformedManifestIsInvalidArgument) {
  const TestState b = State(2);
  struct Case {
    const char* want;
    void (*mutate)(v1::CacheBeginPutRequest&);
  };
  const Case cases[] = {
      {"state_key is 15 bytes",
       [](v1::CacheBeginPutRequest& r) { r.mutable_manifest()->mutable_state_key()->pop_back(); }},
      {"digest is 0 bytes",
       [](v1::CacheBeginPutRequest& r) { r.mutable_manifest()->mutable_model()->clear_digest(); }},
      {"tier 0",
       [](v1::CacheBeginPutRequest& r) {
         r.mutable_manifest()->mutable_pages(1)->set_tier(v1::PAGE_TIER_UNSPECIFIED);
       }},
      {"out of order",
       [](v1::CacheBeginPutRequest& r) {
         r.mutable_manifest()->mutable_pages()->SwapElements(0, 3);
       }},
      {"importance",
       [](v1::CacheBeginPutRequest& r) {
         r.mutable_manifest()->mutable_pages(2)->set_importance(-1);
       }},
      {"no pages", [](v1::CacheBeginPutRequest& r) { r.mutable_manifest()->clear_pages(); }},
      {"for a prefix of 3 tokens",
       [](v1::CacheBeginPutRequest& r) { r.mutable_manifest()->set_token_count(3); }},
      {"token_count 64 differs from the 32 tokens sent",
       [](v1::CacheBeginPutRequest& r) { r.mutable_manifest()->set_token_count(64); }},
      {"not the hash", [](v1::CacheBeginPutRequest& r) { r.set_tokens(0, 999999); }},
  };
  for (const Case& c : cases) {
    v1::CacheBeginPutRequest req = BeginPutOf(b);
    c.mutate(req);
    grpc::Status g = RawBeginPut(req);
    EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.want;
    EXPECT_NE(g.error_message().find(c.want), std::string::npos) << g.error_message();
  }
  // Malformed keys on the other calls.
  grpc::ClientContext ctx;
  v1::CacheGetRequest get;
  get.set_state_key("short");
  v1::CacheGetResponse resp;
  EXPECT_EQ(stub_->Get(grpctest::WithDeadline(ctx), get, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // A key without its namespace: refused, naming the field.
  for (int call = 0; call < 2; ++call) {
    grpc::ClientContext c;
    grpc::Status g;
    if (call == 0) {
      v1::CacheGetRequest bare;
      bare.set_state_key(std::string(a_.manifest.state_key.begin(), a_.manifest.state_key.end()));
      bare.mutable_expected_model()->set_digest(
          std::string(a_.manifest.model.begin(), a_.manifest.model.end()));
      bare.set_reply_address("x");
      g = stub_->Get(grpctest::WithDeadline(c), bare, &resp);
    } else {
      v1::CacheStateKeyRequest bare;
      bare.set_state_key(std::string(a_.manifest.state_key.begin(), a_.manifest.state_key.end()));
      v1::CacheEmpty empty;
      g = stub_->Delete(grpctest::WithDeadline(c), bare, &empty);
    }
    EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << g.error_message();
    EXPECT_NE(g.error_message().find("namespace_key"), std::string::npos) << g.error_message();
  }
  ExpectUnchanged();
}

TEST_F(CacheNodeGrpcTest, DuplicateDifferentPayloadIsAlreadyExists) {
  auto other = MakeTestStateForTokens(TestNamespace(), TestModel(), {}, a_.tokens, 42);
  ASSERT_TRUE(other.ok());
  absl::Status s = client_->Put(other->manifest, other->tokens, other->spans()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_NE(s.message().find("already stored with a different payload"), std::string::npos) << s;
  ExpectUnchanged();
}

TEST_F(CacheNodeGrpcTest, CorruptPagesAreRefused) {
  TestState b = State(2);
  std::vector<uint8_t> bad = b.pages[3];
  bad[bad.size() - 1] ^= 0x20;
  auto spans = b.spans();
  spans[3] = bad;
  absl::Status s = client_->Put(b.manifest, b.tokens, spans).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("CRC32C"), std::string::npos) << s;
  ExpectUnchanged();
}

}  // namespace
}  // namespace glimpse::cache_node
