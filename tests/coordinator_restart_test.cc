// The real glimpse-coordinator binary: leases and members survive a SIGKILL and a restart, with
// its state in a RocksDB directory or in etcd (where the new process has nothing local: as a
// coordinator started on another machine, once the killed one's election lease expired); the worker
// re-registers and its leased session is a hot hit again; a lease that ends while the coordinator
// is down is warm after the restart.
#include <signal.h>

#include <filesystem>
#include <thread>

#include "core/common/grpc/server.h"
#include "core/common/service_process.h"
#include "core/etcd/etcd_process.h"
#include "glimpse/v1/coordinator.grpc.pb.h"
#include "gtest/gtest.h"

namespace glimpse {
namespace {

class CoordinatorRestartTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("glimpse_coord_it_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    log_ = (dir_ / "coordinator.log").string();
    if (GetParam() == "etcd") {
      auto etcd = etcd::EtcdProcess::Start((dir_ / "etcd").string());
      ASSERT_TRUE(etcd.ok()) << etcd.status();
      etcd_ = *std::move(etcd);
    }
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "coordinator log:\n" << Tail(log_) << "\n";
    std::filesystem::remove_all(dir_);
  }
  ServiceProcess Start() {
    absl::StatusOr<ServiceProcess> p = ServiceProcess::Start(
        GLIMPSE_COORDINATOR_BINARY,
        {etcd_ != nullptr ? "--store.etcd_endpoints=" + etcd_->endpoint()
                          : "--store.path=" + (dir_ / "db").string(),
         "--lease.default_ttl=1h", "--lease.pin_cost=continuum", "--lease.max_ttl=2h",
         "--lease.default_queue_delay=10s", "--membership.heartbeat_interval=30s",
         "--shutdown_grace=500ms", "--election.ttl=2s", "--election.poll=100ms"},
        log_);
    EXPECT_TRUE(p.ok()) << p.status();
    auto channel = ClientChannel(p->grpc_address());
    EXPECT_TRUE(channel.ok());
    stub_ = v1::Coordinator::NewStub(*channel);
    // On etcd, a restarted coordinator leads once the killed one's election lease has expired.
    const absl::Time end = absl::Now() + absl::Seconds(60);
    grpc::Status st;
    while (true) {
      grpc::ClientContext ctx;
      v1::StatsResponse stats;
      st = stub_->Stats(&ctx, v1::StatsRequest(), &stats);
      if (st.error_code() != grpc::StatusCode::UNAVAILABLE || absl::Now() > end) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_TRUE(st.ok()) << st.error_message();
    return *std::move(p);
  }
  v1::RegisterNodeResponse Register() {
    v1::RegisterNodeRequest req;
    req.set_node_id("d1");
    req.set_role(v1::NODE_ROLE_DECODE);
    req.set_grpc_address("127.0.0.1:7001");
    req.set_capacity_bytes(int64_t{1} << 30);
    v1::RegisterNodeResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = stub_->RegisterNode(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }
  v1::RouteTurnResponse Route(const std::string& session, int64_t history) {
    v1::RouteTurnRequest req;
    req.set_session_id(session);
    req.set_tenant("acme");
    req.set_history_tokens(history);
    req.set_new_tokens(200);
    req.set_max_output_tokens(50);
    v1::RouteTurnResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = stub_->RouteTurn(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }
  v1::EndTurnResponse EndTurn(const std::string& session, int64_t hint_ms) {
    v1::EndTurnRequest req;
    req.set_session_id(session);
    req.set_kv_tokens(250);
    req.set_tool_name("run_tests");
    req.set_expected_duration_ms(hint_ms);
    v1::EndTurnResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = stub_->EndTurn(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }
  v1::SessionInfo Get(const std::string& session) {
    v1::GetSessionRequest req;
    req.set_session_id(session);
    v1::GetSessionResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = stub_->GetSession(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.session();
  }

  std::filesystem::path dir_;
  std::string log_;
  std::unique_ptr<etcd::EtcdProcess> etcd_;  // the "etcd" store only
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_P(CoordinatorRestartTest, SigkillAndRestartKeepLeases) {
  ServiceProcess coordinator = Start();
  EXPECT_FALSE(Register().reregistered());
  Route("long", 0);
  v1::EndTurnResponse long_lease = EndTurn("long", 0);  // default_ttl: 1 h
  ASSERT_EQ(long_lease.ttl_ms(), 3'600'000);
  Route("short", 0);
  // Hint 1 s, G = Q·eta + R = 10 s + R: pinned for 1.2 s.
  v1::EndTurnResponse short_lease = EndTurn("short", 1000);
  ASSERT_EQ(short_lease.ttl_ms(), 1200) << short_lease.ttl_source();
  const v1::SessionInfo before = Get("long");
  ASSERT_EQ(before.tier(), v1::SESSION_TIER_LEASED);

  coordinator.Kill();                                            // SIGKILL: no shutdown path runs
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));  // "short"'s lease ends meanwhile
  coordinator = Start();

  const v1::SessionInfo after = Get("long");
  EXPECT_EQ(after.tier(), v1::SESSION_TIER_LEASED);
  EXPECT_EQ(after.lease_expires_unix_ms(), before.lease_expires_unix_ms());
  EXPECT_EQ(after.reserved_bytes(), before.reserved_bytes());
  EXPECT_EQ(after.decode_worker_id(), "d1");
  EXPECT_EQ(after.turns(), 1);
  EXPECT_EQ(Get("short").tier(), v1::SESSION_TIER_WARM);
  // Members were kept; the worker re-registers at the same address.
  v1::ListNodesResponse nodes;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->ListNodes(&ctx, v1::ListNodesRequest(), &nodes).ok());
  ASSERT_EQ(nodes.nodes_size(), 1);
  EXPECT_EQ(nodes.nodes(0).reserved_bytes(), before.reserved_bytes());
  EXPECT_TRUE(Register().reregistered());
  v1::RouteTurnResponse hot = Route("long", 250);
  EXPECT_TRUE(hot.hot_hit());
  EXPECT_EQ(hot.turn_index(), 2);
  EXPECT_FALSE(Route("short", 250).hot_hit());
  stub_.reset();
  absl::StatusOr<int> rc = coordinator.Terminate();
  ASSERT_TRUE(rc.ok());
  EXPECT_EQ(*rc, 0);
}

INSTANTIATE_TEST_SUITE_P(Store, CoordinatorRestartTest, ::testing::Values("rocksdb", "etcd"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace glimpse
