// The coordinator through its gRPC adapter: a real in-process server (GrpcServer), a real client
// channel, FakeClock time.
#include "coordinator/coordinator_grpc.h"

#include <atomic>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/cluster/coordinator_peers.h"
#include "core/common/grpc/certificates.h"
#include "core/common/grpc/identity.h"
#include "core/common/grpc/server.h"
#include "core/common/grpc/testdata/test_certs.h"
#include "core/transport/loopback/loopback_transport.h"
#include "core/transport/peer_allowlist.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glimpse::coordinator {
namespace {

class CoordinatorGrpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions o;
    o.kv_bytes_per_token = 100;
    o.lease.min_samples = 4;
    o.lease.pin_cost = PinCost::kContinuum;  // c = 1 and default_ttl: Continuum's rules
    o.lease.default_ttl = absl::Seconds(5);
    auto svc = CoordinatorService::Create(o, &clock_, &store_);
    ASSERT_TRUE(svc.ok());
    service_ = *std::move(svc);
    adapter_ = std::make_unique<CoordinatorGrpc>(service_.get());
    auto server = GrpcServer::Start({}, {adapter_.get()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto channel = ClientChannel("127.0.0.1:" + std::to_string(server_->port()));
    ASSERT_TRUE(channel.ok());
    stub_ = v1::Coordinator::NewStub(*channel);
  }
  void TearDown() override { server_->Shutdown(absl::Now()); }

  // The coordinator's members as an allowlist, refreshed every `refresh` and on a miss at most
  // every `min_miss_gap`.
  std::shared_ptr<cluster::CoordinatorPeers> StartPeers(absl::Duration refresh,
                                                        absl::Duration min_miss_gap) {
    cluster::CoordinatorPeersOptions o;
    o.coordinator_addresses = {"127.0.0.1:" + std::to_string(server_->port())};
    o.refresh = refresh;
    o.min_miss_gap = min_miss_gap;
    absl::StatusOr<std::shared_ptr<cluster::CoordinatorPeers>> peers =
        cluster::CoordinatorPeers::Start(o);
    EXPECT_TRUE(peers.ok()) << peers.status();
    return peers.ok() ? *peers : nullptr;
  }

  grpc::Status Register(const std::string& id, v1::NodeRole role, const std::string& addr,
                        int64_t capacity, v1::RegisterNodeResponse* resp = nullptr,
                        const std::string& ucx = std::string("\x01\x02", 2),
                        const std::vector<std::string>& clients = {}) {
    v1::RegisterNodeRequest req;
    req.set_node_id(id);
    req.set_role(role);
    req.set_grpc_address(addr);
    req.set_ucx_address(ucx);
    for (const std::string& c : clients) req.add_client_ucx_addresses(c);
    req.set_capacity_bytes(capacity);
    v1::RegisterNodeResponse local;
    grpc::ClientContext ctx;
    return stub_->RegisterNode(&ctx, req, resp ? resp : &local);
  }
  grpc::Status Route(const std::string& session, int64_t history, int64_t fresh,
                     v1::RouteTurnResponse* resp, const std::string& tenant = "acme") {
    v1::RouteTurnRequest req;
    req.set_session_id(session);
    req.set_tenant(tenant);
    req.set_history_tokens(history);
    req.set_new_tokens(fresh);
    req.set_max_output_tokens(50);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return stub_->RouteTurn(&ctx, req, resp);
  }
  grpc::Status EndTurn(const std::string& session, int64_t kv, const std::string& tool,
                       int64_t hint_ms, v1::EndTurnResponse* resp) {
    v1::EndTurnRequest req;
    req.set_session_id(session);
    req.set_kv_tokens(kv);
    req.set_tool_name(tool);
    req.set_expected_duration_ms(hint_ms);
    grpc::ClientContext ctx;
    return stub_->EndTurn(&ctx, req, resp);
  }
  v1::StatsResponse Stats() {
    v1::StatsResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->Stats(&ctx, v1::StatsRequest(), &resp).ok());
    return resp;
  }

  FakeClock clock_;
  MemoryStateStore store_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<CoordinatorGrpc> adapter_;
  std::unique_ptr<GrpcServer> server_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(CoordinatorGrpcTest, RouteLeaseAndHotHitOverGrpc) {
  v1::RegisterNodeResponse reg;
  ASSERT_TRUE(Register("d1", v1::NODE_ROLE_DECODE, "127.0.0.1:7001", 1'000'000, &reg).ok());
  EXPECT_EQ(reg.heartbeat_interval_ms(), 1000);
  EXPECT_EQ(reg.missed_heartbeats(), 3);
  ASSERT_TRUE(Register("p1", v1::NODE_ROLE_PREFILL, "127.0.0.1:7101", 0).ok());
  v1::RouteTurnResponse r;
  grpc::Status st = Route("s1", 0, 500, &r);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(r.decode_worker_id(), "d1");
  EXPECT_EQ(r.decode_ucx_address(), std::string("\x01\x02", 2));
  EXPECT_EQ(r.prefill_worker_id(), "p1");
  EXPECT_EQ(r.reserved_bytes(), 55'000);
  EXPECT_EQ(r.turn_index(), 1);
  v1::EndTurnResponse l;
  ASSERT_TRUE(EndTurn("s1", 520, "grep", 0, &l).ok());
  EXPECT_EQ(l.ttl_ms(), 5000);
  EXPECT_EQ(l.ttl_source(), "default");
  EXPECT_EQ(l.held_bytes(), 52'000);
  EXPECT_EQ(l.lease_expires_unix_ms(), absl::ToUnixMillis(clock_.Now()) + 5000);
  clock_.Advance(absl::Seconds(1));
  v1::ToolCallEndedRequest tr;
  tr.set_session_id("s1");
  v1::ToolCallEndedResponse tresp;
  grpc::ClientContext tctx;
  ASSERT_TRUE(stub_->ToolCallEnded(&tctx, tr, &tresp).ok());
  EXPECT_EQ(tresp.recorded_duration_ms(), 1000);
  EXPECT_TRUE(tresp.lease_alive());
  ASSERT_TRUE(Route("s1", 520, 20, &r).ok());
  EXPECT_TRUE(r.hot_hit());
  EXPECT_TRUE(r.prefill_on_decode());
  EXPECT_TRUE(r.prefill_worker_id().empty());
  v1::GetSessionRequest gr;
  gr.set_session_id("s1");
  v1::GetSessionResponse gresp;
  grpc::ClientContext gctx;
  ASSERT_TRUE(stub_->GetSession(&gctx, gr, &gresp).ok());
  EXPECT_EQ(gresp.session().tier(), v1::SESSION_TIER_ACTIVE);
  EXPECT_EQ(gresp.session().turns(), 2);
  v1::EndSessionRequest er;
  er.set_session_id("s1");
  v1::EndSessionResponse eresp;
  grpc::ClientContext ectx;
  ASSERT_TRUE(stub_->EndSession(&ectx, er, &eresp).ok());
  EXPECT_EQ(eresp.turns(), 2);
  EXPECT_EQ(eresp.released_bytes(), 59'000);
  EXPECT_EQ(Stats().reserved_bytes(), 0);
  EXPECT_EQ(Stats().hot_hits(), 1);
}

TEST_F(CoordinatorGrpcTest, HeartbeatsExpireDeadNodes) {
  ASSERT_TRUE(Register("d1", v1::NODE_ROLE_DECODE, "127.0.0.1:7001", 1'000'000).ok());
  ASSERT_TRUE(Register("d2", v1::NODE_ROLE_DECODE, "127.0.0.1:7002", 1'000'000).ok());
  for (int i = 0; i < 8; ++i) {
    clock_.Advance(absl::Milliseconds(500));
    v1::HeartbeatRequest hb;
    hb.set_node_id("d1");
    hb.mutable_load()->set_queue_length(2);
    v1::HeartbeatResponse hresp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Heartbeat(&ctx, hb, &hresp).ok());
  }
  v1::ListNodesRequest lr;
  lr.set_include_dead(true);
  v1::ListNodesResponse nodes;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->ListNodes(&ctx, lr, &nodes).ok());
  ASSERT_EQ(nodes.nodes_size(), 2);
  EXPECT_TRUE(nodes.nodes(0).alive());
  EXPECT_EQ(nodes.nodes(0).load().queue_length(), 2);
  EXPECT_FALSE(nodes.nodes(1).alive());
  v1::HeartbeatRequest hb;
  hb.set_node_id("d2");
  v1::HeartbeatResponse hresp;
  grpc::ClientContext ctx2;
  grpc::Status st = stub_->Heartbeat(&ctx2, hb, &hresp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("declared dead"), std::string::npos) << st.error_message();
  v1::RouteTurnResponse r;
  ASSERT_TRUE(Route("s1", 0, 10, &r).ok());
  EXPECT_EQ(r.decode_worker_id(), "d1");
}

TEST_F(CoordinatorGrpcTest, BadRequestsGetClearStatusesAndChangeNothing) {
  ASSERT_TRUE(Register("d1", v1::NODE_ROLE_DECODE, "127.0.0.1:7001", 100'000).ok());
  v1::RouteTurnResponse r;
  ASSERT_TRUE(Route("s1", 0, 100, &r).ok());
  v1::EndTurnResponse l;
  ASSERT_TRUE(EndTurn("s1", 100, "grep", 0, &l).ok());
  const v1::StatsResponse before = Stats();

  grpc::Status st = Register("d1", v1::NODE_ROLE_DECODE, "10.1.1.1:7001", 5);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_NE(st.error_message().find("127.0.0.1:7001"), std::string::npos) << st.error_message();
  st = Register("x", v1::NODE_ROLE_UNSPECIFIED, "127.0.0.1:1", 5);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  st = Register("x", v1::NODE_ROLE_PREFILL, "127.0.0.1:1", 0, nullptr, "u",
                std::vector<std::string>(9, "c"));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("9 client_ucx_addresses (at most 8)"), std::string::npos)
      << st.error_message();
  st = Register("x", v1::NODE_ROLE_PREFILL, "127.0.0.1:1", 0, nullptr, "u", {"c", ""});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("client_ucx_addresses[1] is 0 bytes"), std::string::npos)
      << st.error_message();
  st = EndTurn("ghost", 1, "grep", 0, &l);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(st.error_message().find("ghost"), std::string::npos);
  // A negative hint, an absurd hint (over lease.max_hint = 1 h): INVALID_ARGUMENT. (EndTurn with a
  // hint needs a running turn; check the hint with one.)
  ASSERT_TRUE(Route("s2", 0, 100, &r).ok());
  const v1::StatsResponse mid = Stats();
  st = EndTurn("s2", 100, "grep", -5, &l);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("-5ms"), std::string::npos) << st.error_message();
  st = EndTurn("s2", 100, "grep", 1000LL * 3600 * 24 * 30, &l);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  {
    v1::EndTurnRequest req;
    req.set_session_id("s2");
    req.set_kv_tokens(100);
    req.set_prefill_queue_ms(-1);
    grpc::ClientContext ctx;
    st = stub_->EndTurn(&ctx, req, &l);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("prefill queue wait"), std::string::npos);
  }
  st = Route("s1", -1, 10, &r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  st = Route("s3", 0, 10'000, &r);  // 1,005,000 bytes > 100,000 - reserved: no room at all
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("1005000"), std::string::npos) << st.error_message();
  v1::GetSessionRequest gr;
  gr.set_session_id("nope");
  v1::GetSessionResponse gresp;
  grpc::ClientContext gctx;
  EXPECT_EQ(stub_->GetSession(&gctx, gr, &gresp).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::HeartbeatRequest hb;
  hb.set_node_id("nope");
  v1::HeartbeatResponse hresp;
  grpc::ClientContext hctx;
  EXPECT_EQ(stub_->Heartbeat(&hctx, hb, &hresp).error_code(), grpc::StatusCode::NOT_FOUND);

  const v1::StatsResponse after = Stats();
  EXPECT_EQ(after.routes(), mid.routes());
  EXPECT_EQ(after.reserved_bytes(), mid.reserved_bytes());
  EXPECT_EQ(after.sessions_leased(), before.sessions_leased());
  EXPECT_EQ(after.capacity_bytes(), before.capacity_bytes());
  EXPECT_EQ(after.nodes_alive(), 1);
  v1::ListNodesResponse nodes;
  grpc::ClientContext lctx;
  ASSERT_TRUE(stub_->ListNodes(&lctx, v1::ListNodesRequest(), &nodes).ok());
  EXPECT_EQ(nodes.nodes(0).grpc_address(), "127.0.0.1:7001");
  EXPECT_EQ(nodes.nodes(0).capacity_bytes(), 100'000);
}

// The coordinator's members as the allowlist of transport engines (core/cluster): the addresses
// registered nodes stated, a node that registers later at its first batch, none after it leaves.
TEST_F(CoordinatorGrpcTest, RegisteredTransportAddressesAreTheOnlyPeersEnginesDealWith) {
  auto fabric = transport::NewLoopbackFabric();
  auto engine = [&] { return *transport::CreateLoopbackTransport(fabric); };
  std::unique_ptr<transport::Transport> inbox = engine(), cache_client = engine(), ship = engine(),
                                        outsider = engine();
  ASSERT_TRUE(Register("d1", v1::NODE_ROLE_DECODE, "127.0.0.1:7001", 100'000, nullptr,
                       inbox->LocalAddress(), {cache_client->LocalAddress()})
                  .ok());
  {
    v1::ListNodesResponse nodes;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->ListNodes(&ctx, v1::ListNodesRequest(), &nodes).ok());
    ASSERT_EQ(nodes.nodes(0).client_ucx_addresses_size(), 1);
    EXPECT_EQ(nodes.nodes(0).client_ucx_addresses(0), cache_client->LocalAddress());
  }
  const std::shared_ptr<cluster::CoordinatorPeers> peers =
      StartPeers(absl::Milliseconds(20), absl::ZeroDuration());
  ASSERT_NE(peers, nullptr);
  EXPECT_TRUE(peers->Allows(inbox->LocalAddress()));
  EXPECT_TRUE(peers->Allows(cache_client->LocalAddress()));
  EXPECT_FALSE(peers->Allows(outsider->LocalAddress()));
  EXPECT_FALSE(peers->Allows(""));

  // An engine restricted to the members takes batches from the registered cache client only.
  std::unique_ptr<transport::Transport> guarded = transport::RestrictToPeers(engine(), peers);
  auto ship_one = [&](transport::Transport& from) {
    absl::StatusOr<transport::PeerId> to = from.Connect(guarded->LocalAddress());
    ASSERT_TRUE(to.ok()) << to.status();
    std::vector<uint8_t> bytes(64, 1);
    std::vector<std::span<const uint8_t>> batch = {bytes};
    ASSERT_TRUE(from.Submit(*to, batch).ok());
  };
  ship_one(*outsider);
  EXPECT_EQ(guarded->Receive(absl::Now() + absl::Seconds(5)).status().code(),
            absl::StatusCode::kPermissionDenied);
  ship_one(*cache_client);
  EXPECT_TRUE(guarded->Receive(absl::Now() + absl::Seconds(5)).ok());
  EXPECT_EQ(guarded->Connect(outsider->LocalAddress()).status().code(),
            absl::StatusCode::kPermissionDenied);

  // A prefill worker that registers now is accepted at once (a miss refreshes the list).
  ASSERT_TRUE(
      Register("p1", v1::NODE_ROLE_PREFILL, "127.0.0.1:7101", 0, nullptr, ship->LocalAddress())
          .ok());
  EXPECT_TRUE(peers->Allows(ship->LocalAddress()));

  // A node that deregisters is dropped at a later refresh.
  v1::DeregisterRequest dr;
  dr.set_node_id("d1");
  v1::DeregisterResponse dresp;
  grpc::ClientContext dctx;
  ASSERT_TRUE(stub_->Deregister(&dctx, dr, &dresp).ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (peers->Allows(inbox->LocalAddress()) && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_FALSE(peers->Allows(inbox->LocalAddress()));
  EXPECT_FALSE(peers->Allows(cache_client->LocalAddress()));
  EXPECT_TRUE(peers->Allows(ship->LocalAddress()));
}

// A node that registers right after the allowlist refreshed (inside min_miss_gap) is accepted at
// its first batch: the miss waits out the gap and refreshes instead of refusing it. Peek, which
// screens batch headers without waiting, refuses only an address refused since the last list.
TEST_F(CoordinatorGrpcTest, ANodeThatJoinsJustAfterARefreshIsAcceptedAtOnce) {
  auto fabric = transport::NewLoopbackFabric();
  std::unique_ptr<transport::Transport> outsider = *transport::CreateLoopbackTransport(fabric);
  std::unique_ptr<transport::Transport> joiner = *transport::CreateLoopbackTransport(fabric);
  const std::shared_ptr<cluster::CoordinatorPeers> peers =
      StartPeers(absl::Hours(1), absl::Milliseconds(300));  // only misses refresh
  ASSERT_NE(peers, nullptr);
  EXPECT_FALSE(peers->Allows(outsider->LocalAddress()));  // a miss: the list was just fetched
  EXPECT_EQ(peers->Peek(outsider->LocalAddress()), transport::PeerVerdict::kRefused);
  EXPECT_EQ(peers->Peek(joiner->LocalAddress()), transport::PeerVerdict::kUnknown);
  ASSERT_TRUE(
      Register("d9", v1::NODE_ROLE_DECODE, "127.0.0.1:7009", 1000, nullptr, joiner->LocalAddress())
          .ok());
  EXPECT_TRUE(peers->Allows(joiner->LocalAddress()));
  EXPECT_EQ(peers->Peek(joiner->LocalAddress()), transport::PeerVerdict::kAllowed);
  EXPECT_FALSE(peers->Allows(outsider->LocalAddress()));
}

// No race on join: 50 times, a node registers and ships its first batch to an engine restricted to
// the members at once, while other threads keep the CPUs busy; every batch is taken (a miss
// refreshes the list before it refuses).
TEST_F(CoordinatorGrpcTest, FiftyNodesThatShipRightAfterRegisteringAreAllAccepted) {
  auto fabric = transport::NewLoopbackFabric();
  const std::shared_ptr<cluster::CoordinatorPeers> peers =
      StartPeers(absl::Hours(1), absl::Milliseconds(20));  // only misses refresh
  ASSERT_NE(peers, nullptr);
  std::unique_ptr<transport::Transport> guarded =
      transport::RestrictToPeers(*transport::CreateLoopbackTransport(fabric), peers);
  std::atomic<bool> busy = true;
  std::vector<std::thread> load;
  for (int i = 0; i < 2; ++i) {
    load.emplace_back([&busy] {
      volatile uint64_t x = 0;
      while (busy) x = x + 1;
    });
  }
  for (int i = 0; i < 50; ++i) {
    std::unique_ptr<transport::Transport> node = *transport::CreateLoopbackTransport(fabric);
    ASSERT_TRUE(Register(absl::StrCat("j", i), v1::NODE_ROLE_DECODE, "127.0.0.1:7001", 1000,
                         nullptr, node->LocalAddress())
                    .ok());
    absl::StatusOr<transport::PeerId> to = node->Connect(guarded->LocalAddress());
    ASSERT_TRUE(to.ok()) << to.status();
    std::vector<uint8_t> bytes(64, static_cast<uint8_t>(i));
    std::vector<std::span<const uint8_t>> batch = {bytes};
    ASSERT_TRUE(node->Submit(*to, batch).ok());
    absl::StatusOr<transport::ReceivedBatch> got =
        guarded->Receive(absl::Now() + absl::Seconds(10));
    EXPECT_TRUE(got.ok()) << "node " << i << ": " << got.status();
  }
  busy = false;
  for (std::thread& t : load) t.join();
  EXPECT_EQ(guarded->GetMetrics().peers_refused, 0u);
}

// With mutual TLS every RPC checks the caller's certificate: its role must be one the RPC is for,
// a node registers, heartbeats and leaves only as itself, a certificate without a Glimpse identity
// is UNAUTHENTICATED, and a client without a certificate does not get a connection. The
// coordinator keeps serving the callers that are allowed.
TEST_F(CoordinatorGrpcTest, WithMutualTlsEachRpcIsForItsRolesAndANodeActsOnlyForItself) {
  absl::StatusOr<std::string> dir = glimpse::testing::MakeTestCertificates("glimpse_coord_mtls");
  ASSERT_TRUE(dir.ok()) << dir.status();
  auto spec = [](std::string name, std::string_view role, std::string id) {
    CertificateSpec s;
    s.name = std::move(name);
    s.role = std::string(role);
    s.id = std::move(id);
    return s;
  };
  ASSERT_TRUE(
      MakeCertificates(*dir, {spec("coordinator", roles::kCoordinator, "c0"),
                              spec("frontend", roles::kFrontend, "f0"),
                              spec("d1", roles::kDecode, "d1"), spec("d2", roles::kDecode, "d2")})
          .ok());
  GrpcServerOptions o;
  o.tls = CertificateFiles(*dir, "coordinator");
  auto server = GrpcServer::Start(o, {adapter_.get()});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  auto stub_as = [&](const TlsFiles& tls) {
    return v1::Coordinator::NewStub(*ClientChannel(address, tls));
  };
  auto frontend = stub_as(CertificateFiles(*dir, "frontend"));
  auto d1 = stub_as(CertificateFiles(*dir, "d1"));
  auto d2 = stub_as(CertificateFiles(*dir, "d2"));
  auto anonymous = stub_as(CertificateFiles(*dir, "client"));  // no identity in it
  auto no_cert = stub_as({"", "", *dir + "/ca.pem", ""});
  auto deadline = [](grpc::ClientContext& ctx) {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  };
  auto register_as = [&](v1::Coordinator::Stub& stub, const std::string& id) {
    v1::RegisterNodeRequest req;
    req.set_node_id(id);
    req.set_role(v1::NODE_ROLE_DECODE);
    req.set_grpc_address("127.0.0.1:7001");
    req.set_ucx_address("u-" + id);
    req.set_capacity_bytes(100'000);
    v1::RegisterNodeResponse resp;
    grpc::ClientContext ctx;
    deadline(ctx);
    return stub.RegisterNode(&ctx, req, &resp);
  };
  auto heartbeat_as = [&](v1::Coordinator::Stub& stub, const std::string& id) {
    v1::HeartbeatRequest req;
    req.set_node_id(id);
    v1::HeartbeatResponse resp;
    grpc::ClientContext ctx;
    deadline(ctx);
    return stub.Heartbeat(&ctx, req, &resp);
  };
  auto route_as = [&](v1::Coordinator::Stub& stub) {
    v1::RouteTurnRequest req;
    req.set_session_id("s1");
    req.set_tenant("acme");
    req.set_new_tokens(10);
    req.set_max_output_tokens(10);
    v1::RouteTurnResponse resp;
    grpc::ClientContext ctx;
    deadline(ctx);
    return stub.RouteTurn(&ctx, req, &resp);
  };

  // A decode worker registers and heartbeats as itself, not as another node.
  EXPECT_TRUE(register_as(*d1, "d1").ok());
  grpc::Status as_other = register_as(*d1, "d2");
  EXPECT_EQ(as_other.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(as_other.error_message(), ::testing::HasSubstr("acts only for itself"));
  EXPECT_TRUE(heartbeat_as(*d1, "d1").ok());
  EXPECT_EQ(heartbeat_as(*d2, "d1").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(heartbeat_as(*frontend, "d1").error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // Routing is the frontend's.
  EXPECT_TRUE(route_as(*frontend).ok());
  grpc::Status by_worker = route_as(*d1);
  EXPECT_EQ(by_worker.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(by_worker.error_message(),
              ::testing::HasSubstr("RouteTurn is for frontend; the caller is decode 'd1'"));

  // No identity, no certificate.
  EXPECT_EQ(route_as(*anonymous).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(route_as(*no_cert).error_code(), grpc::StatusCode::UNAVAILABLE);
  // The allowed callers were served throughout.
  EXPECT_TRUE(heartbeat_as(*d1, "d1").ok());
  (*server)->Shutdown(absl::Now());
  std::system(("rm -rf " + *dir).c_str());
}

}  // namespace
}  // namespace glimpse::coordinator
