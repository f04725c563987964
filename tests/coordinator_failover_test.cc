// Two real glimpse-coordinator processes on one etcd member: one leads, the other answers
// UNAVAILABLE naming it; a client given both addresses, or only the follower's
// (core/cluster/coordinators.h), reaches the leader. SIGKILL the leader mid-session: the other
// leads within the election ttl with every session, lease and member intact. Partition the leader
// from etcd, as a TcpProxy between it and etcd cut (connections reset), and as its network
// namespace's link to etcd gone dead (packets vanish; core/common/netns.h, skipped without
// CAP_NET_ADMIN): it stops leading before the other starts, and every lease either of them granted
// is in the state the new leader holds, as granted: no lease is granted by two leaders. Kill one of
// three etcd members: the leader goes on leading and granting.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/cluster/coordinators.h"
#include "core/cluster/etcd_membership.h"
#include "core/common/grpc/server.h"
#include "core/common/netns.h"
#include "core/common/service_process.h"
#include "core/common/tcp_proxy.h"
#include "core/common/wait_for.h"
#include "core/etcd/announcement.h"
#include "core/etcd/etcd_process.h"
#include "glimpse/v1/coordinator.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glimpse {
namespace {

using ::testing::HasSubstr;

// What the tests wait for happens within ttl + poll (2.1 s); a loaded machine may take longer.
constexpr absl::Duration kPatience = absl::Seconds(60);

std::unique_ptr<grpc::ClientContext> Context() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  return ctx;
}

class CoordinatorFailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("coordinator_failover_", ::getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    auto etcd = etcd::EtcdProcess::Start((dir_ / "etcd").string());
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
  }
  void TearDown() override {
    if (HasFailure()) {
      for (const std::string& log : logs_) std::cerr << log << ":\n" << Tail(log) << "\n";
    }
    std::filesystem::remove_all(dir_);
  }

  // A coordinator reaching etcd at `etcd` (members' addresses, or a proxy in front of one); in
  // `ns` when given, serving clients at `host` there.
  ServiceProcess Start(const std::string& name, const std::string& etcd,
                       const std::string& ttl = "2s", const Netns* ns = nullptr,
                       const std::string& host = "") {
    logs_.push_back((dir_ / (name + ".log")).string());
    std::vector<std::string> args = {"--store.etcd_endpoints=" + etcd,
                                     "--store.etcd_timeout=500ms",
                                     "--election.ttl=" + ttl,
                                     "--election.poll=100ms",
                                     "--lease.default_ttl=1h",
                                     "--lease.pin_cost=continuum",
                                     "--lease.max_ttl=2h",
                                     "--lease.default_queue_delay=10s",
                                     "--membership.heartbeat_interval=30s",
                                     "--shutdown_grace=500ms"};
    std::string binary = GLIMPSE_COORDINATOR_BINARY;
    if (ns != nullptr) {
      args.insert(args.end(),
                  {"--listen=0.0.0.0:0", "--insecure_listen=true", "--advertise_host=" + host});
      std::vector<std::string> exec = ns->Exec();
      exec.push_back(binary);
      binary = exec.front();
      args.insert(args.begin(), exec.begin() + 1, exec.end());
    }
    absl::StatusOr<ServiceProcess> p = ServiceProcess::Start(binary, args, logs_.back());
    EXPECT_TRUE(p.ok()) << p.status();
    return *std::move(p);
  }

  static std::unique_ptr<cluster::Coordinators> Connect(std::vector<std::string> addresses) {
    return cluster::Coordinators::Connect(addresses, {}).value();
  }

  // How a test reaches coordinators: through Coordinators (which follows a follower to the
  // leader), or one process only.
  using Client = std::function<grpc::Status(const cluster::Coordinators::Rpc&)>;
  static Client Via(cluster::Coordinators& c) {
    return [&c](const cluster::Coordinators::Rpc& rpc) { return c.Call(Context, rpc); };
  }
  static Client Only(const ServiceProcess& p) { return Only(p.grpc_address()); }
  static Client Only(const std::string& address) {
    std::shared_ptr<v1::Coordinator::Stub> stub =
        v1::Coordinator::NewStub(ClientChannel(address).value());
    return [stub](const cluster::Coordinators::Rpc& rpc) {
      std::unique_ptr<grpc::ClientContext> ctx = Context();
      return rpc(*stub, ctx.get());
    };
  }

  static grpc::Status Stats(const Client& c) {
    v1::StatsResponse resp;
    return c([&](auto& stub, auto* ctx) { return stub.Stats(ctx, v1::StatsRequest(), &resp); });
  }
  static bool Leads(const ServiceProcess& p) { return Stats(Only(p)).ok(); }
  static bool Leads(const std::string& address) { return Stats(Only(address)).ok(); }
  // The leader `p` names in its refusal's metadata; "" while it names none (or leads).
  static std::string Named(const ServiceProcess& p) {
    auto stub = v1::Coordinator::NewStub(ClientChannel(p.grpc_address()).value());
    grpc::ClientContext ctx;
    v1::StatsResponse unused;
    if (stub->Stats(&ctx, v1::StatsRequest(), &unused).ok()) return "";
    const auto named = ctx.GetServerTrailingMetadata().find(cluster::kLeaderMetadata);
    if (named == ctx.GetServerTrailingMetadata().end()) return "";
    return std::string(named->second.data(), named->second.size());
  }
  template <typename Pred>
  static bool WaitUntil(Pred pred) {
    return WaitFor(pred, kPatience);
  }
  // Waits until the coordinator at `address` leads; false after kPatience.
  static bool AwaitLeading(const ServiceProcess& p) { return AwaitLeading(p.grpc_address()); }
  static bool AwaitLeading(const std::string& address) {
    return WaitFor([&] { return Leads(address); }, kPatience);
  }

  static grpc::Status Register(const Client& c) {
    v1::RegisterNodeRequest req;
    req.set_node_id("d1");
    req.set_role(v1::NODE_ROLE_DECODE);
    req.set_grpc_address("127.0.0.1:7001");
    req.set_capacity_bytes(int64_t{1} << 40);
    req.set_incarnation("i1");
    v1::RegisterNodeResponse resp;
    return c([&](auto& stub, auto* ctx) { return stub.RegisterNode(ctx, req, &resp); });
  }
  // Routes a turn of `session` and ends it: the lease granted, or the first failure.
  static absl::StatusOr<v1::EndTurnResponse> Turn(const Client& c, const std::string& session,
                                                  int64_t history) {
    v1::RouteTurnRequest route;
    route.set_session_id(session);
    route.set_tenant("acme");
    route.set_history_tokens(history);
    route.set_new_tokens(200);
    route.set_max_output_tokens(50);
    v1::RouteTurnResponse routed;
    grpc::Status st = c([&](auto& stub, auto* ctx) { return stub.RouteTurn(ctx, route, &routed); });
    if (!st.ok()) return absl::UnavailableError(absl::StrCat("RouteTurn: ", st.error_message()));
    v1::EndTurnRequest end;
    end.set_session_id(session);
    end.set_kv_tokens(250);
    end.set_tool_name("run_tests");
    v1::EndTurnResponse lease;
    st = c([&](auto& stub, auto* ctx) { return stub.EndTurn(ctx, end, &lease); });
    if (!st.ok()) return absl::UnavailableError(absl::StrCat("EndTurn: ", st.error_message()));
    return lease;
  }
  static absl::StatusOr<v1::SessionInfo> Get(const Client& c, const std::string& session) {
    v1::GetSessionRequest req;
    req.set_session_id(session);
    v1::GetSessionResponse resp;
    grpc::Status st = c([&](auto& stub, auto* ctx) { return stub.GetSession(ctx, req, &resp); });
    if (!st.ok()) return absl::UnavailableError(st.error_message());
    return resp.session();
  }

  void GrantAcrossAPartition(const std::string& a_address, ServiceProcess& b,
                             const std::function<void()>& cut);

  std::filesystem::path dir_;
  std::vector<std::string> logs_;
  std::unique_ptr<etcd::EtcdProcess> etcd_;
};

// Leader `a` (clients reach it at `a_address`) and follower `b`: two clients grant leases, each
// through one of them only, before, during and after `cut` partitions a from etcd. b takes over,
// a stops granting before b grants, and b's state holds every lease granted, as granted.
void CoordinatorFailoverTest::GrantAcrossAPartition(const std::string& a_address, ServiceProcess& b,
                                                    const std::function<void()>& cut) {
  using T = CoordinatorFailoverTest;
  const T::Client to_a = T::Only(a_address);
  const T::Client to_b = T::Only(b);
  ASSERT_TRUE(T::Register(to_a).ok());

  // Two clients grant leases, each through one coordinator only, before, during and after the
  // partition; every lease acknowledged is recorded with who granted it and when.
  struct Grant {
    std::string by;
    absl::Time sent, acknowledged;
    int64_t expires_unix_ms = -1;  // -1: acknowledged, but the coordinator stepped down before
                                   // the read that follows
  };
  absl::Mutex mu;
  std::map<std::string, Grant> granted;  // by session
  std::atomic<bool> stop{false};
  auto grant = [&](const Client* c, const std::string& by) {
    for (int i = 0; !stop; ++i) {
      const std::string session = absl::StrCat(by, "-", i);
      Grant g{by, absl::Now(), absl::InfinitePast()};
      if (!T::Turn(*c, session, 0).ok()) {
        absl::SleepFor(absl::Milliseconds(10));
        continue;
      }
      g.acknowledged = absl::Now();
      if (absl::StatusOr<v1::SessionInfo> info = T::Get(*c, session); info.ok()) {
        g.expires_unix_ms = info->lease_expires_unix_ms();
      }
      absl::MutexLock lock(&mu);
      granted[session] = g;
    }
  };
  auto count = [&](const std::string& by) {
    absl::MutexLock lock(&mu);
    return std::count_if(granted.begin(), granted.end(),
                         [&](const auto& g) { return g.second.by == by; });
  };
  std::thread via_a(grant, &to_a, "a");
  std::thread via_b(grant, &to_b, "b");
  const absl::Time end = absl::Now() + kPatience;
  while (count("a") < 5 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
  cut();
  // No ASSERT while the clients run: the threads must be joined whatever happens.
  const bool took_over = T::AwaitLeading(b);
  while (took_over && count("b") < 5 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
  stop = true;
  via_a.join();
  via_b.join();
  ASSERT_TRUE(took_over);
  EXPECT_FALSE(T::Leads(a_address));
  EXPECT_GE(count("a"), 5);
  EXPECT_GE(count("b"), 5);
  absl::MutexLock lock(&mu);
  absl::Time first_by_b = absl::InfiniteFuture();
  for (const auto& [session, g] : granted) {
    if (g.by == "b") first_by_b = std::min(first_by_b, g.acknowledged);
  }
  for (const auto& [session, g] : granted) {
    // No lease asked of a after b had granted one was granted by a: never two leaders at once.
    if (g.by == "a") {
      EXPECT_LT(g.sent, first_by_b) << session;
    }
    // Every lease either granted is in b's state, as it was granted.
    absl::StatusOr<v1::SessionInfo> info = T::Get(to_b, session);
    ASSERT_TRUE(info.ok()) << session << ": " << info.status();
    EXPECT_EQ(info->tier(), v1::SESSION_TIER_LEASED) << session;
    if (g.expires_unix_ms >= 0) {
      EXPECT_EQ(info->lease_expires_unix_ms(), g.expires_unix_ms);
    }
  }
}

TEST_F(CoordinatorFailoverTest, AFollowerNamesTheLeaderAndTakesOverWhenItIsKilled) {
  ServiceProcess a = Start("a", etcd_->endpoint());
  ASSERT_TRUE(AwaitLeading(a));
  ServiceProcess b = Start("b", etcd_->endpoint());
  // The follower refuses, naming the leader in its message and its trailing metadata (once it
  // has read the leader key).
  const std::string leader = "127.0.0.1:" + std::to_string(a.grpc_port());
  ASSERT_TRUE(WaitUntil([&] { return Named(b) == leader; }));
  auto follower = v1::Coordinator::NewStub(ClientChannel(b.grpc_address()).value());
  grpc::ClientContext ctx;
  v1::StatsResponse unused;
  grpc::Status refused = follower->Stats(&ctx, v1::StatsRequest(), &unused);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(), HasSubstr("the leader is " + leader));
  const auto named = ctx.GetServerTrailingMetadata().find(cluster::kLeaderMetadata);
  ASSERT_NE(named, ctx.GetServerTrailingMetadata().end());
  EXPECT_EQ(std::string(named->second.data(), named->second.size()), leader);
  // A client given only the follower (as one given a Service in front of both) is led to the
  // leader; one given both reaches it too.
  EXPECT_TRUE(Stats(Via(*Connect({b.grpc_address()}))).ok());
  std::unique_ptr<cluster::Coordinators> both = Connect({b.grpc_address(), a.grpc_address()});
  ASSERT_TRUE(Register(Via(*both)).ok());
  absl::StatusOr<v1::EndTurnResponse> lease = Turn(Via(*both), "s1", 0);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_EQ(lease->ttl_ms(), 3'600'000);
  const v1::SessionInfo before = Get(Via(*both), "s1").value();

  a.Kill();
  const absl::Time died = absl::Now();
  ASSERT_TRUE(AwaitLeading(b));
  RecordProperty("takeover_ms", absl::ToInt64Milliseconds(absl::Now() - died));
  const v1::SessionInfo after = Get(Via(*both), "s1").value();
  EXPECT_EQ(after.tier(), v1::SESSION_TIER_LEASED);
  EXPECT_EQ(after.lease_expires_unix_ms(), before.lease_expires_unix_ms());
  EXPECT_EQ(after.reserved_bytes(), before.reserved_bytes());
  EXPECT_EQ(after.decode_worker_id(), "d1");
  // The worker's heartbeat finds the new leader; the session's next turn is a hot hit there.
  ASSERT_TRUE(Register(Via(*both)).ok());
  v1::RouteTurnRequest next;
  next.set_session_id("s1");
  next.set_tenant("acme");
  next.set_history_tokens(250);
  next.set_new_tokens(10);
  next.set_max_output_tokens(10);
  v1::RouteTurnResponse routed;
  ASSERT_TRUE(
      Via(*both)([&](auto& stub, auto* ctx) { return stub.RouteTurn(ctx, next, &routed); }).ok());
  EXPECT_TRUE(routed.hot_hit());
  EXPECT_EQ(routed.turn_index(), 2);

  // The old leader, back, follows.
  ServiceProcess a2 = Start("a2", etcd_->endpoint());
  EXPECT_TRUE(WaitUntil([&] { return Named(a2) == "127.0.0.1:" + std::to_string(b.grpc_port()); }));
  EXPECT_FALSE(Leads(a2));
  EXPECT_TRUE(Leads(b));
}

TEST_F(CoordinatorFailoverTest, ALeaderCutOffFromEtcdStopsBeforeTheOtherGrantsAnyLease) {
  std::unique_ptr<TcpProxy> link = TcpProxy::Start(etcd_->endpoint()).value();
  ServiceProcess a = Start("a", link->address());
  ASSERT_TRUE(AwaitLeading(a));
  ServiceProcess b = Start("b", etcd_->endpoint());
  GrantAcrossAPartition(a.grpc_address(), b, [&] { link->Cut(); });
}

// The same, the partition a real one: a runs in a network namespace of its own, with one link to
// etcd and one to its clients; the etcd link goes dead (its packets vanish, no connection is
// reset), so a learns only from its calls' deadlines that etcd is gone.
TEST_F(CoordinatorFailoverTest, ALeaderWhoseLinkToEtcdGoesDeadStopsBeforeTheOtherGrantsAnyLease) {
  absl::StatusOr<std::unique_ptr<Netns>> ns = Netns::Create(0);
  if (!ns.ok()) GTEST_SKIP() << "no network namespaces here: " << ns.status();
  absl::StatusOr<Netns::Link> to_etcd = (*ns)->AddLink();
  ASSERT_TRUE(to_etcd.ok()) << to_etcd.status();
  absl::StatusOr<Netns::Link> to_clients = (*ns)->AddLink();
  ASSERT_TRUE(to_clients.ok()) << to_clients.status();
  // An etcd member a can reach from its namespace (at this end of the link, the same port).
  auto etcd = etcd::EtcdProcess::Start((dir_ / "etcd-netns").string(), {}, to_etcd->here_ip);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  const std::string port = (*etcd)->endpoint().substr((*etcd)->endpoint().rfind(':'));
  ServiceProcess a = Start("a", to_etcd->here_ip + port, "2s", ns->get(), to_clients->there_ip);
  const std::string a_address = absl::StrCat(to_clients->there_ip, ":", a.grpc_port());
  ASSERT_TRUE(AwaitLeading(a_address));
  ServiceProcess b = Start("b", (*etcd)->endpoint());
  GrantAcrossAPartition(a_address, b, [&] { EXPECT_TRUE((*ns)->Cut(*to_etcd).ok()); });
}

// A worker announced on etcd, as a worker with membership.etcd_endpoints announces itself
// (cluster/etcd_membership.h), is declared dead as soon as its announcement ends, its session
// demoted, long before its missed heartbeats would (30 s × 3 here, past the test's patience).
TEST_F(CoordinatorFailoverTest, AWorkerWhoseAnnouncementEndsIsDeadBeforeItMissesAHeartbeat) {
  ServiceProcess a = Start("a", etcd_->endpoint());
  ASSERT_TRUE(AwaitLeading(a));
  const Client to_a = Only(a);
  ASSERT_TRUE(Register(to_a).ok());  // d1
  ASSERT_TRUE(Turn(to_a, "s1", 0).ok());
  auto stats = [&] {
    v1::StatsResponse resp;
    const grpc::Status st =
        to_a([&](auto& stub, auto* ctx) { return stub.Stats(ctx, v1::StatsRequest(), &resp); });
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  };
  etcd::EtcdOptions eo;
  eo.endpoints = {etcd_->endpoint()};
  std::unique_ptr<etcd::EtcdClient> client = etcd::EtcdClient::Create(eo).value();
  auto announced = etcd::Announcement::Start(
      client.get(), "/glimpse/members/decode/" + cluster::WorkerAnnouncement("d1", "i1"),
      "127.0.0.1:7001", absl::Seconds(2));
  ASSERT_TRUE(announced.ok()) << announced.status();
  ASSERT_TRUE(WaitUntil([&] { return stats().workers_announced() == 1; }));
  EXPECT_EQ(stats().nodes_alive(), 1);
  announced->reset();  // the worker stops (or its lease ends)
  ASSERT_TRUE(WaitUntil([&] { return stats().nodes_dead() == 1; }));
  EXPECT_EQ(stats().workers_announced(), 0);
  EXPECT_EQ(Get(to_a, "s1").value().tier(), v1::SESSION_TIER_WARM);  // demoted: dead node
}

TEST_F(CoordinatorFailoverTest, AnEtcdMemberKilledOfThreeChangesNothing) {
  auto members = etcd::EtcdProcess::StartCluster((dir_ / "etcd3").string(), 3);
  ASSERT_TRUE(members.ok()) << members.status();
  std::vector<std::string> endpoints;
  for (const auto& m : *members) endpoints.push_back(m->endpoint());
  // A ttl well past etcd's own election, which stalls renewals and writes when its leader dies:
  // about 1 s, but over 5 s on a loaded 2-core machine (the coordinator retries a write for its
  // ttl, then resigns: a failed turn).
  ServiceProcess a = Start("a", absl::StrJoin(endpoints, ","), "15s");
  ASSERT_TRUE(AwaitLeading(a));
  ServiceProcess b = Start("b", absl::StrJoin(endpoints, ","), "15s");
  std::unique_ptr<cluster::Coordinators> both = Connect({a.grpc_address(), b.grpc_address()});
  ASSERT_TRUE(Register(Via(*both)).ok());
  ASSERT_TRUE(Turn(Via(*both), "before", 0).ok());
  for (int kill : {0, 1}) {  // the member each client tries first, then another (one at a time)
    (*members)[kill]->Kill();
    absl::StatusOr<v1::EndTurnResponse> lease = Turn(Via(*both), absl::StrCat("after-", kill), 0);
    EXPECT_TRUE(lease.ok()) << lease.status();
    EXPECT_TRUE(Leads(a));
    ASSERT_TRUE((*members)[kill]->Restart().ok());
  }
  EXPECT_EQ(Get(Via(*both), "before").value().tier(), v1::SESSION_TIER_LEASED);
  EXPECT_FALSE(Leads(b));
}

}  // namespace
}  // namespace glimpse

// The partition test's links stay in this process's own network namespace (netns.h); without the
// privilege to make one it is skipped and the rest run as anywhere.
int main(int argc, char** argv) {
  const absl::Status isolated = glimpse::Netns::IsolateThisProcess();
  ::testing::InitGoogleTest(&argc, argv);
  if (!isolated.ok()) std::cerr << "network namespace tests will skip: " << isolated << "\n";
  return RUN_ALL_TESTS();
}
