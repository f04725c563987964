#include "coordinator/coordinator_service.h"

#include <atomic>
#include <filesystem>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "coordinator/etcd_state_store.h"
#include "coordinator/rocks_state_store.h"
#include "core/etcd/etcd_process.h"
#include "gtest/gtest.h"

namespace glimpse::coordinator {
namespace {

using absl::Seconds;

CoordinatorOptions TestOptions() {
  CoordinatorOptions o;
  o.kv_bytes_per_token = 1;  // bytes == tokens, for readable arithmetic
  o.membership = {Seconds(1), 3};
  o.lease.min_samples = 4;
  o.lease.pin_cost = PinCost::kContinuum;  // c = 1 and default_ttl: Continuum's rules
  o.lease.default_ttl = Seconds(10);
  o.lease.default_queue_delay = Seconds(5);
  o.lease.reload = ReloadCost{absl::ZeroDuration(), absl::Milliseconds(1)};
  o.prefill_on_decode_tokens = 100;
  o.admission_default_wait = Seconds(2);
  return o;
}

NodeSpec Node(const std::string& id, NodeRole role, int64_t capacity, int port) {
  return NodeSpec{id, role, "127.0.0.1:" + std::to_string(port), "ucx-" + id, capacity, ""};
}

RouteRequest Turn(const std::string& session, int64_t history, int64_t fresh, int64_t out,
                  const std::string& tenant = "acme") {
  RouteRequest r;
  r.session = session;
  r.tenant = tenant;
  r.history_tokens = history;
  r.new_tokens = fresh;
  r.max_output_tokens = out;
  r.no_wait = true;
  return r;
}

class CoordinatorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(TestOptions()); }
  void Start(const CoordinatorOptions& o) {
    auto s = CoordinatorService::Create(o, &clock_, &store_);
    ASSERT_TRUE(s.ok()) << s.status();
    svc_ = *std::move(s);
  }
  void AddCluster(int64_t decode_capacity) {
    ASSERT_TRUE(svc_->RegisterNode(Node("d1", NodeRole::kDecode, decode_capacity, 7001)).ok());
    ASSERT_TRUE(svc_->RegisterNode(Node("d2", NodeRole::kDecode, decode_capacity, 7002)).ok());
    ASSERT_TRUE(svc_->RegisterNode(Node("p1", NodeRole::kPrefill, 0, 7101)).ok());
  }
  // Moves the clock by `d` in 500 ms steps; every live node heartbeats at each step.
  void Pass(absl::Duration d) {
    for (absl::Duration done; done < d; done += absl::Milliseconds(500)) {
      clock_.Advance(std::min(absl::Milliseconds(500), d - done));
      for (const NodeView& n : svc_->ListNodes(std::nullopt, false)) {
        ASSERT_TRUE(svc_->Heartbeat(n.state.spec.id, {}).ok());
      }
    }
  }
  // Registers d1 (1,000 bytes), fills it with the turn "big" and starts a turn of `session` that
  // waits up to 30 s for room (its result into `got`); returns once it is queued.
  std::thread QueueBehindABigTurn(const std::string& session, absl::StatusOr<RouteResult>* got) {
    EXPECT_TRUE(svc_->RegisterNode(Node("d1", NodeRole::kDecode, 1000, 7001)).ok());
    EXPECT_TRUE(svc_->RouteTurn(Turn("big", 0, 900, 0)).ok());
    RouteRequest waiting = Turn(session, 0, 500, 0);
    waiting.no_wait = false;
    waiting.max_wait = Seconds(30);
    std::thread t([this, waiting, got] { *got = svc_->RouteTurn(waiting); });
    while (svc_->Stats().queued != 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return t;
  }
  void Invariants() {
    std::string why;
    EXPECT_TRUE(svc_->CheckInvariants(&why)) << why;
  }
  FakeClock clock_;
  MemoryStateStore store_;
  std::unique_ptr<CoordinatorService> svc_;
};

TEST_F(CoordinatorServiceTest, LeaseKeepsSessionHotUntilItExpires) {
  AddCluster(10'000);
  absl::StatusOr<RouteResult> r = svc_->RouteTurn(Turn("s1", 0, 500, 100));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->hot_hit);
  EXPECT_EQ(r->turn_index, 1);
  EXPECT_EQ(r->reserved_bytes, 600);
  EXPECT_FALSE(r->prefill_on_decode);  // 500 new tokens > 100
  EXPECT_EQ(r->prefill.id, "p1");
  const std::string worker = r->decode.id;
  // No samples: the default TTL (10 s); the reservation shrinks to the kept KV.
  absl::StatusOr<LeaseResult> l = svc_->EndTurn({"s1", 550, "grep", std::nullopt, std::nullopt});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->ttl, Seconds(10));
  EXPECT_EQ(l->source, "default");
  EXPECT_EQ(l->held_bytes, 550);
  EXPECT_EQ(svc_->GetSession("s1")->tier, SessionTier::kLeased);
  Pass(Seconds(4));
  r = svc_->RouteTurn(Turn("s1", 550, 50, 100));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->hot_hit);
  EXPECT_EQ(r->decode.id, worker);
  EXPECT_TRUE(r->prefill_on_decode);  // 50 new tokens
  EXPECT_EQ(r->turn_index, 2);
  // The 4 s pause was recorded as a "grep" duration (no ToolCallEnded came).
  EXPECT_EQ(svc_->Stats().tools.at(0).samples, 1);
  ASSERT_TRUE(svc_->EndTurn({"s1", 700, "grep", std::nullopt, std::nullopt}).ok());
  clock_.Advance(Seconds(2));
  ASSERT_TRUE(svc_->Heartbeat(worker, {}).ok());  // nothing to release yet
  Pass(absl::Milliseconds(7500));                 // t = 13.5 s: the lease (until 14 s) is alive
  EXPECT_EQ(svc_->GetSession("s1")->tier, SessionTier::kLeased);
  clock_.Advance(Seconds(1));  // the lease ends
  svc_->Tick();
  absl::StatusOr<SessionState> s = svc_->GetSession("s1");
  EXPECT_EQ(s->tier, SessionTier::kWarm);
  EXPECT_EQ(s->reserved_bytes, 0);
  EXPECT_EQ(svc_->Stats().demoted_expired, 1);
  // The worker is told to drop it at its next heartbeat.
  auto released = svc_->Heartbeat(worker, {});
  ASSERT_TRUE(released.ok());
  EXPECT_EQ(*released, std::vector<std::string>{"s1"});
  r = svc_->RouteTurn(Turn("s1", 700, 50, 100));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->hot_hit);
  Invariants();
}

TEST_F(CoordinatorServiceTest, AFailedTurnGetsNoLeaseAndNoToolSample) {
  AddCluster(10'000);
  absl::StatusOr<RouteResult> r = svc_->RouteTurn(Turn("s1", 0, 500, 100));
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string worker = r->decode.id;
  EndTurnRequest failed{"s1", 0, "grep", std::nullopt, std::nullopt};
  failed.turn_failed = true;
  absl::StatusOr<LeaseResult> l = svc_->EndTurn(failed);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->ttl, absl::ZeroDuration());
  EXPECT_EQ(l->source, "turn-failed");
  absl::StatusOr<SessionState> s = svc_->GetSession("s1");
  EXPECT_EQ(s->tier, SessionTier::kWarm);
  EXPECT_EQ(s->reserved_bytes, 0);
  // The worker is told to drop whatever it kept of the session.
  auto released = svc_->Heartbeat(worker, {});
  ASSERT_TRUE(released.ok());
  EXPECT_EQ(*released, std::vector<std::string>{"s1"});
  clock_.Advance(Seconds(3));
  r = svc_->RouteTurn(Turn("s1", 0, 500, 100));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->hot_hit);
  EXPECT_TRUE(svc_->Stats().tools.empty());  // the 3 s pause was no tool call
  Invariants();
}

// A caller that gave up on turn 1 and sent turn 2 before turn 1's end reached the coordinator:
// turn 1's late (failed) end is refused and turn 2 runs on and ends normally.
// The tokens a session's state summarises (which the next turn's new tokens count from) are kept
// beside the KV tokens it holds, survive a restart, and are never fewer than those.
TEST_F(CoordinatorServiceTest, EndTurnKeepsTheSummarisedTokens) {
  AddCluster(10'000);
  ASSERT_TRUE(svc_->RouteTurn(Turn("s1", 0, 500, 100)).ok());
  EndTurnRequest end{"s1", 150, "grep", std::nullopt, std::nullopt};
  end.summarised_tokens = 149;  // fewer than it holds
  absl::StatusOr<LeaseResult> l = svc_->EndTurn(end);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument) << l.status();
  EXPECT_EQ(svc_->GetSession("s1")->tier, SessionTier::kActive);  // nothing changed
  end.summarised_tokens = 590;
  ASSERT_TRUE(svc_->EndTurn(end).ok());
  EXPECT_EQ(svc_->GetSession("s1")->kv_tokens, 150);
  EXPECT_EQ(svc_->GetSession("s1")->summarised_tokens, 590);
  Start(TestOptions());  // a restarted coordinator reads it back
  EXPECT_EQ(svc_->GetSession("s1")->summarised_tokens, 590);
  ASSERT_TRUE(svc_->RouteTurn(Turn("s2", 0, 50, 10)).ok());
  ASSERT_TRUE(svc_->EndTurn({"s2", 60, "", std::nullopt, std::nullopt}).ok());
  EXPECT_EQ(svc_->GetSession("s2")->summarised_tokens, 60);  // 0: the KV tokens
}

TEST_F(CoordinatorServiceTest, ALateEndOfASupersededTurnLeavesTheNewerTurnRunning) {
  AddCluster(10'000);
  absl::StatusOr<RouteResult> first = svc_->RouteTurn(Turn("s1", 0, 50, 10));
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<RouteResult> second = svc_->RouteTurn(Turn("s1", 0, 50, 10));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->turn_index, 2);
  EndTurnRequest late{"s1", 0, "", std::nullopt, std::nullopt};
  late.turn_failed = true;
  late.turn_index = first->turn_index;
  absl::StatusOr<LeaseResult> refused = svc_->EndTurn(late);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(), "EndTurn s1: turn 1 was superseded by turn 2");
  EXPECT_EQ(svc_->GetSession("s1")->tier, SessionTier::kActive);
  EndTurnRequest done{"s1", 60, "", std::nullopt, std::nullopt};
  done.turn_index = second->turn_index;
  absl::StatusOr<LeaseResult> l = svc_->EndTurn(done);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(svc_->GetSession("s1")->tier, SessionTier::kLeased);
  Invariants();
}

// The default pin cost (pressure) with demotion on: no admission waits for a lease's memory, so
// c = 0.5 / (admissions + 1); with no samples the lease is the break-even G / c. Without demotion
// a lease is a commitment and the default TTL stays.
TEST_F(CoordinatorServiceTest, PressureCostWithDemotionGivesTheBreakEvenLeaseBeforeAnySample) {
  CoordinatorOptions o = TestOptions();
  o.lease.pin_cost = PinCost::kPressure;
  Start(o);
  AddCluster(10'000);
  ASSERT_TRUE(svc_->RouteTurn(Turn("s1", 0, 500, 100)).ok());  // one admission
  EXPECT_DOUBLE_EQ(svc_->Stats().pin_cost, 0.25);
  // G = Q·eta + R(550) = 5·1 + 0.55 = 5.55 s; G / c = 22.2 s.
  absl::StatusOr<LeaseResult> l = svc_->EndTurn({"s1", 550, "grep", std::nullopt, std::nullopt});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_NEAR(absl::ToDoubleSeconds(l->ttl), 22.2, 1e-6);
  EXPECT_EQ(l->source, "break-even");

  o.demote_under_pressure = false;
  Start(o);
  AddCluster(10'000);
  ASSERT_TRUE(svc_->RouteTurn(Turn("s2", 0, 500, 100)).ok());
  EXPECT_DOUBLE_EQ(svc_->Stats().pin_cost, 0.01);  // 0 of 1 waited: the floor
  l = svc_->EndTurn({"s2", 550, "grep", std::nullopt, std::nullopt});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->ttl, Seconds(10));
  EXPECT_EQ(l->source, "default");
  Invariants();
}

// A worker whose announcement on etcd ends is dead at once, with no missed heartbeat; one never
// announced is left to its heartbeats; the end of an earlier incarnation's announcement leaves a
// worker that registered again alone.
TEST_F(CoordinatorServiceTest, AWorkerWhoseAnnouncementEndsIsDeadAtOnce) {
  AddCluster(10'000);  // d1, d2, p1
  absl::StatusOr<RouteResult> r = svc_->RouteTurn(Turn("s1", 0, 50, 10));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(svc_->EndTurn({"s1", 60, "grep", std::nullopt, std::nullopt}).ok());
  const std::string gone = r->decode.id, kept = gone == "d1" ? "d2" : "d1";
  svc_->SetAnnouncedWorkers({{gone, ""}, {kept, ""}});  // AddCluster's incarnations
  EXPECT_EQ(svc_->Stats().workers_announced, 2);
  EXPECT_EQ(svc_->Stats().nodes_dead, 0);
  // `kept` restarted: its new incarnation registered and announced, the old one's ends.
  NodeSpec again = Node(kept, NodeRole::kDecode, 10'000, kept == "d1" ? 7001 : 7002);
  again.incarnation = "2";
  ASSERT_TRUE(svc_->RegisterNode(again).ok());
  svc_->SetAnnouncedWorkers({{gone, ""}, {kept, "2"}});
  EXPECT_EQ(svc_->Stats().nodes_dead, 0);
  svc_->SetAnnouncedWorkers({{kept, "2"}});
  EXPECT_EQ(svc_->Stats().nodes_dead, 1);
  EXPECT_EQ(svc_->GetSession("s1")->tier, SessionTier::kWarm);
  EXPECT_EQ(svc_->Stats().demoted_dead_node, 1);
  svc_->SetAnnouncedWorkers({});  // p1 was never announced: untouched
  EXPECT_EQ(svc_->Stats().nodes_dead, 2);
  EXPECT_EQ(svc_->Stats().nodes_alive, 1);
  Invariants();
}

TEST_F(CoordinatorServiceTest, DeadNodeSessionsFallBackToWarmAndRoutingAvoidsIt) {
  AddCluster(10'000);
  absl::StatusOr<RouteResult> r = svc_->RouteTurn(Turn("s1", 0, 50, 10));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(svc_->EndTurn({"s1", 60, "grep", std::nullopt, std::nullopt}).ok());
  const std::string dead = r->decode.id, live = dead == "d1" ? "d2" : "d1";
  // Only `live` and p1 heartbeat for 3.5 s: `dead` misses three intervals.
  for (int i = 0; i < 7; ++i) {
    clock_.Advance(absl::Milliseconds(500));
    ASSERT_TRUE(svc_->Heartbeat(live, {}).ok());
    ASSERT_TRUE(svc_->Heartbeat("p1", {}).ok());
  }
  EXPECT_EQ(svc_->Stats().nodes_dead, 1);
  EXPECT_EQ(svc_->GetSession("s1")->tier, SessionTier::kWarm);
  EXPECT_EQ(svc_->Stats().demoted_dead_node, 1);
  for (int i = 0; i < 5; ++i) {
    r = svc_->RouteTurn(Turn("n" + std::to_string(i), 0, 50, 10));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->decode.id, live);
  }
  r = svc_->RouteTurn(Turn("s1", 60, 50, 10));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->hot_hit);
  EXPECT_EQ(r->decode.id, live);
  EXPECT_EQ(svc_->Heartbeat(dead, {}).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(svc_->ListNodes(NodeRole::kDecode, false).size(), 1u);
  EXPECT_EQ(svc_->ListNodes(NodeRole::kDecode, true).size(), 2u);
  Invariants();
}

TEST_F(CoordinatorServiceTest, ANodeBackAsANewIncarnationLosesItsHotSessions) {
  NodeSpec d1 = Node("d1", NodeRole::kDecode, 10'000, 7001);
  d1.incarnation = "boot-1";
  ASSERT_TRUE(svc_->RegisterNode(d1).ok());
  ASSERT_TRUE(svc_->RouteTurn(Turn("s1", 0, 50, 10)).ok());
  ASSERT_TRUE(svc_->EndTurn({"s1", 60, "grep", std::nullopt, std::nullopt}).ok());
  auto same = svc_->RegisterNode(d1);  // the same process again (e.g. after a coordinator restart)
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(same->reregistered);
  EXPECT_EQ(same->demoted, 0);
  EXPECT_EQ(svc_->GetSession("s1")->tier, SessionTier::kLeased);
  d1.incarnation = "boot-2";  // the worker restarted: its memory is gone
  auto restarted = svc_->RegisterNode(d1);
  ASSERT_TRUE(restarted.ok());
  EXPECT_EQ(restarted->demoted, 1);
  EXPECT_EQ(svc_->GetSession("s1")->tier, SessionTier::kWarm);
  Invariants();
}

TEST_F(CoordinatorServiceTest, AReleaseIsWithdrawnWhenTheSessionComesBackToTheWorker) {
  ASSERT_TRUE(svc_->RegisterNode(Node("d1", NodeRole::kDecode, 10'000, 7001)).ok());
  ASSERT_TRUE(svc_->RouteTurn(Turn("s1", 0, 50, 10)).ok());
  ASSERT_TRUE(svc_->EndTurn({"s1", 60, "grep", std::nullopt, std::nullopt}).ok());
  clock_.Advance(Seconds(2) + absl::Milliseconds(500));
  ASSERT_TRUE(svc_->Heartbeat("d1", {}).ok());
  clock_.Advance(Seconds(2) + absl::Milliseconds(500));
  ASSERT_TRUE(svc_->Heartbeat("d1", {}).ok());
  clock_.Advance(Seconds(2) + absl::Milliseconds(500));
  ASSERT_TRUE(svc_->Heartbeat("d1", {}).ok());
  clock_.Advance(Seconds(2) + absl::Milliseconds(500));  // 10 s: the lease ends
  svc_->Tick();
  ASSERT_EQ(svc_->GetSession("s1")->tier, SessionTier::kWarm);
  // Routed back to d1 before d1 heard "release s1": the release is withdrawn.
  absl::StatusOr<RouteResult> r = svc_->RouteTurn(Turn("s1", 60, 50, 10));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->decode.id, "d1");
  absl::StatusOr<std::vector<std::string>> released = svc_->Heartbeat("d1", {});
  ASSERT_TRUE(released.ok());
  EXPECT_TRUE(released->empty());
}

TEST_F(CoordinatorServiceTest, DeregisterDemotesTheNodesSessionsAndRemovesItsCapacity) {
  AddCluster(10'000);
  absl::StatusOr<RouteResult> r = svc_->RouteTurn(Turn("s1", 0, 50, 10));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(svc_->EndTurn({"s1", 60, "grep", std::nullopt, std::nullopt}).ok());
  absl::StatusOr<int> demoted = svc_->Deregister(r->decode.id);
  ASSERT_TRUE(demoted.ok());
  EXPECT_EQ(*demoted, 1);
  EXPECT_EQ(svc_->GetSession("s1")->tier, SessionTier::kWarm);
  EXPECT_EQ(svc_->Stats().capacity_bytes, 10'000);
  EXPECT_EQ(svc_->ListNodes(NodeRole::kDecode, true).size(), 1u);
  EXPECT_EQ(svc_->Deregister(r->decode.id).status().code(), absl::StatusCode::kNotFound);
  Invariants();
}

TEST_F(CoordinatorServiceTest, StuckTurnsLoseTheirMemoryAndIdleSessionsAreForgotten) {
  CoordinatorOptions o = TestOptions();
  o.turn_timeout = Seconds(5);
  o.session_idle_ttl = Seconds(20);
  o.reap_interval = Seconds(1);
  Start(o);
  AddCluster(10'000);
  ASSERT_TRUE(svc_->RouteTurn(Turn("stuck", 0, 500, 0)).ok());  // its frontend never ends it
  ASSERT_TRUE(svc_->RouteTurn(Turn("fine", 0, 100, 0)).ok());
  ASSERT_TRUE(svc_->EndTurn({"fine", 100, "", std::nullopt, std::nullopt}).ok());
  Pass(Seconds(4));
  svc_->Tick();
  EXPECT_EQ(svc_->GetSession("stuck")->tier, SessionTier::kActive);
  Pass(Seconds(2));
  svc_->Tick();
  EXPECT_EQ(svc_->GetSession("stuck")->tier, SessionTier::kWarm);
  EXPECT_EQ(svc_->GetSession("stuck")->reserved_bytes, 0);
  EXPECT_EQ(svc_->Stats().turns_timed_out, 1);
  // A late EndTurn is answered with tau = 0: the memory is no longer reserved.
  absl::StatusOr<LeaseResult> late = svc_->EndTurn({"stuck", 500, "", std::nullopt, std::nullopt});
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->ttl, absl::ZeroDuration());
  Pass(Seconds(21));
  svc_->Tick();
  EXPECT_EQ(svc_->GetSession("stuck").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(svc_->GetSession("fine").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(svc_->Stats().sessions_forgotten, 2);
  Invariants();
}

TEST_F(CoordinatorServiceTest, PressureDemotesTheLeastValuableLeaseFirst) {
  CoordinatorOptions o = TestOptions();
  o.lease.default_queue_delay = Seconds(100);  // G = 100 s + R(400) = 100.4 s
  Start(o);
  ASSERT_TRUE(svc_->RegisterNode(Node("d1", NodeRole::kDecode, 1000, 7001)).ok());
  // "fast" always returns after 1 s: tau = 1 s, P(reuse | 0.5 s elapsed) = 1. "slow" returns after
  // {1, 2, 200, 300} s: J(2) = 0.5·100.4 − 2 is the best, tau = 2 s, P(reuse | 0.5 s) = 0.5.
  const int slow_s[] = {1, 2, 200, 300};
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(svc_->RouteTurn(Turn("warmup" + std::to_string(i), 0, 10, 0)).ok());
    ASSERT_TRUE(
        svc_->EndTurn({"warmup" + std::to_string(i), 0, "fast", std::nullopt, std::nullopt}).ok());
    ASSERT_TRUE(svc_->ToolCallEnded("warmup" + std::to_string(i), Seconds(1)).ok());
    ASSERT_TRUE(svc_->EndSession("warmup" + std::to_string(i)).ok());
  }
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(svc_->RouteTurn(Turn("w" + std::to_string(i), 0, 10, 0)).ok());
    ASSERT_TRUE(
        svc_->EndTurn({"w" + std::to_string(i), 0, "slow", std::nullopt, std::nullopt}).ok());
    ASSERT_TRUE(svc_->ToolCallEnded("w" + std::to_string(i), Seconds(slow_s[i])).ok());
    ASSERT_TRUE(svc_->EndSession("w" + std::to_string(i)).ok());
  }
  // Two leases of 400 bytes each.
  ASSERT_TRUE(svc_->RouteTurn(Turn("a", 0, 400, 0)).ok());
  ASSERT_TRUE(svc_->RouteTurn(Turn("b", 0, 400, 0)).ok());
  absl::StatusOr<LeaseResult> la = svc_->EndTurn({"a", 400, "fast", std::nullopt, std::nullopt});
  absl::StatusOr<LeaseResult> lb = svc_->EndTurn({"b", 400, "slow", std::nullopt, std::nullopt});
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_EQ(la->ttl, Seconds(1));
  EXPECT_EQ(lb->ttl, Seconds(2)) << lb->source;
  clock_.Advance(absl::Milliseconds(500));
  // 400 more bytes: only 200 free; "a" (fast, likely back soon) stays, "b" goes.
  absl::StatusOr<RouteResult> r = svc_->RouteTurn(Turn("c", 0, 400, 0));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(svc_->GetSession("a")->tier, SessionTier::kLeased);
  EXPECT_EQ(svc_->GetSession("b")->tier, SessionTier::kWarm);
  EXPECT_EQ(svc_->Stats().demoted_pressure, 1);
  // Nothing left to demote: a further 400 bytes is RESOURCE_EXHAUSTED and changes nothing.
  CoordinatorStats before = svc_->Stats();
  absl::StatusOr<RouteResult> full = svc_->RouteTurn(Turn("d", 0, 700, 0));
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("700"), std::string::npos) << full.status();
  EXPECT_EQ(svc_->GetSession("d").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(svc_->GetSession("a")->tier, SessionTier::kLeased);
  EXPECT_EQ(svc_->Stats().reserved_bytes, before.reserved_bytes);
  Invariants();
}

// Two leases that would save the same reload with the same certainty: the one whose turn is far
// holds its memory longer for it, so it goes first.
TEST_F(CoordinatorServiceTest, PressureDemotesPerByteSecondTheLeaseThatHoldsLongest) {
  CoordinatorOptions o = TestOptions();
  o.lease.default_queue_delay = Seconds(100);  // G = 100 s + R(400) = 100.4 s
  Start(o);
  ASSERT_TRUE(svc_->RegisterNode(Node("d1", NodeRole::kDecode, 1000, 7001)).ok());
  // "near" always returns after 1 s (tau = 1 s), "far" after 50 s (J(50) = 100.4 − 50 > 0,
  // tau = 50 s): 0.5 s into their pauses both are certain to be reused before their leases end,
  // "near" within 0.5 s more, "far" within 49.5 s.
  for (const auto& [tool, seconds] : {std::pair{"near", 1}, std::pair{"far", 50}}) {
    for (int i = 0; i < 4; ++i) {
      const std::string id = absl::StrCat("warmup-", tool, i);
      ASSERT_TRUE(svc_->RouteTurn(Turn(id, 0, 10, 0)).ok());
      ASSERT_TRUE(svc_->EndTurn({id, 0, tool, std::nullopt, std::nullopt}).ok());
      ASSERT_TRUE(svc_->ToolCallEnded(id, Seconds(seconds)).ok());
      ASSERT_TRUE(svc_->EndSession(id).ok());
    }
  }
  // Equal value per byte; by id alone "a" (near) would go first.
  ASSERT_TRUE(svc_->RouteTurn(Turn("a", 0, 400, 0)).ok());
  ASSERT_TRUE(svc_->RouteTurn(Turn("b", 0, 400, 0)).ok());
  absl::StatusOr<LeaseResult> la = svc_->EndTurn({"a", 400, "near", std::nullopt, std::nullopt});
  absl::StatusOr<LeaseResult> lb = svc_->EndTurn({"b", 400, "far", std::nullopt, std::nullopt});
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_EQ(la->ttl, Seconds(1)) << la->source;
  EXPECT_EQ(lb->ttl, Seconds(50)) << lb->source;
  clock_.Advance(absl::Milliseconds(500));
  ASSERT_TRUE(svc_->RouteTurn(Turn("c", 0, 400, 0)).ok());
  EXPECT_EQ(svc_->GetSession("a")->tier, SessionTier::kLeased);
  EXPECT_EQ(svc_->GetSession("b")->tier, SessionTier::kWarm);
  EXPECT_EQ(svc_->Stats().demoted_pressure, 1);
  Invariants();
}

TEST_F(CoordinatorServiceTest, TenantBudgetIsEnforced) {
  CoordinatorOptions o = TestOptions();
  o.tenant_budget_bytes = 1000;
  o.tenant_budgets = {{"vip", 5000}};
  Start(o);
  AddCluster(10'000);
  ASSERT_TRUE(svc_->RouteTurn(Turn("s1", 0, 800, 0, "small")).ok());
  absl::StatusOr<RouteResult> r = svc_->RouteTurn(Turn("s2", 0, 300, 0, "small"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("tenant small"), std::string::npos) << r.status();
  EXPECT_TRUE(svc_->RouteTurn(Turn("s3", 0, 3000, 0, "vip")).ok());
  Invariants();
}

TEST_F(CoordinatorServiceTest, AdmissionQueueWaitsForRoomOrItsDeadline) {
  // Admitted once "big" ends.
  absl::StatusOr<RouteResult> got = absl::UnknownError("unset");
  std::thread t = QueueBehindABigTurn("s1", &got);
  EXPECT_FALSE(svc_->GetSession("s1").ok());  // waiting
  ASSERT_TRUE(svc_->EndSession("big").ok());
  t.join();
  ASSERT_TRUE(got.ok()) << got.status();
  // Deadline (FakeClock): no room for 900 until the clock passes 2 s.
  RouteRequest doomed = Turn("s2", 0, 900, 0);
  doomed.no_wait = false;
  std::atomic<bool> done{false};
  absl::StatusOr<RouteResult> lost = absl::UnknownError("unset");
  std::thread t2([&] {
    lost = svc_->RouteTurn(doomed);
    done = true;
  });
  while (svc_->Stats().queued != 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_FALSE(done);
  clock_.Advance(absl::Milliseconds(2500));  // past the 2 s deadline, within the node's timeout
  t2.join();
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(lost.status().message().find("admission queue"), std::string::npos) << lost.status();
  EXPECT_EQ(svc_->GetSession("s2").status().code(), absl::StatusCode::kNotFound);
  Invariants();
}

// The admission queue holds max_queued_turns: one more turn is refused at once instead of holding
// a thread (and a caller) until its deadline; the queued one still gets in.
TEST_F(CoordinatorServiceTest, AFullAdmissionQueueRefusesTheNextTurnAtOnce) {
  CoordinatorOptions o = TestOptions();
  o.max_queued_turns = 1;
  Start(o);
  absl::StatusOr<RouteResult> got = absl::UnknownError("unset");
  std::thread t = QueueBehindABigTurn("s1", &got);
  RouteRequest second = Turn("s2", 0, 500, 0);
  second.no_wait = false;
  second.max_wait = Seconds(30);
  absl::StatusOr<RouteResult> refused = svc_->RouteTurn(second);  // returns without any wait
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("admission queue is full"), std::string::npos)
      << refused.status();
  EXPECT_EQ(svc_->Stats().refused_queue_full, 1);
  EXPECT_EQ(svc_->Stats().queued, 1);
  ASSERT_TRUE(svc_->EndSession("big").ok());
  t.join();
  ASSERT_TRUE(got.ok()) << got.status();
  Invariants();
}

// A refused caller that queues by itself measures its wait from its first attempt; one that
// never comes back is forgotten after turn_timeout (the map of first attempts does not grow).
TEST_F(CoordinatorServiceTest, ARefusedSessionsFirstAttemptIsForgottenAfterTheTurnTimeout) {
  CoordinatorOptions o = TestOptions();
  o.turn_timeout = Seconds(5);
  o.reap_interval = Seconds(1);
  Start(o);
  ASSERT_TRUE(svc_->RegisterNode(Node("d1", NodeRole::kDecode, 1000, 7001)).ok());
  ASSERT_TRUE(svc_->RouteTurn(Turn("big", 0, 900, 0)).ok());
  EXPECT_EQ(svc_->RouteTurn(Turn("retry", 0, 500, 0)).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(svc_->RouteTurn(Turn("gone", 0, 500, 0)).status().code(),
            absl::StatusCode::kResourceExhausted);
  Pass(Seconds(3));
  ASSERT_TRUE(svc_->EndSession("big").ok());
  absl::StatusOr<RouteResult> r = svc_->RouteTurn(Turn("retry", 0, 500, 0));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->queue_wait, Seconds(3));
  ASSERT_TRUE(svc_->EndSession("retry").ok());
  Pass(Seconds(4));  // "gone" asked 7 s ago: past the 5 s turn timeout
  svc_->Tick();
  r = svc_->RouteTurn(Turn("gone", 0, 500, 0));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->queue_wait, absl::ZeroDuration());
  Invariants();
}

// A node that stays dead is forgotten after membership.forget_dead_after (and from the store), so
// ids that never come back do not pile up; it may register again afterwards.
TEST_F(CoordinatorServiceTest, ANodeDeadForLongIsForgotten) {
  CoordinatorOptions o = TestOptions();
  o.membership.forget_dead_after = Seconds(30);
  o.reap_interval = Seconds(1);
  Start(o);
  AddCluster(10'000);
  // d2 stops heartbeating: dead after 3 s, forgotten 30 s later.
  auto beat = [&](absl::Duration d) {
    for (absl::Duration done; done < d; done += absl::Milliseconds(500)) {
      clock_.Advance(absl::Milliseconds(500));
      ASSERT_TRUE(svc_->Heartbeat("d1", {}).ok());
      ASSERT_TRUE(svc_->Heartbeat("p1", {}).ok());
      svc_->Tick();
    }
  };
  beat(Seconds(4));
  EXPECT_EQ(svc_->Stats().nodes_dead, 1);
  beat(Seconds(20));
  EXPECT_EQ(svc_->ListNodes(NodeRole::kDecode, true).size(), 2u);  // dead, not yet forgotten
  beat(Seconds(15));
  EXPECT_EQ(svc_->ListNodes(NodeRole::kDecode, true).size(), 1u);
  EXPECT_EQ(svc_->Stats().nodes_dead, 0);
  EXPECT_EQ(svc_->Stats().nodes_forgotten, 1);
  absl::StatusOr<StoredState> stored = store_.Load();
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->nodes.size(), 2u);  // d1 and p1
  EXPECT_EQ(svc_->Heartbeat("d2", {}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(svc_->RegisterNode(Node("d2", NodeRole::kDecode, 10'000, 7002)).ok());
  Invariants();
}

TEST_F(CoordinatorServiceTest, BadInputIsAClearErrorAndChangesNothing) {
  AddCluster(10'000);
  ASSERT_TRUE(svc_->RouteTurn(Turn("s1", 0, 50, 10)).ok());
  ASSERT_TRUE(svc_->EndTurn({"s1", 60, "grep", std::nullopt, std::nullopt}).ok());
  const CoordinatorStats before = svc_->Stats();
  const SessionState s1 = *svc_->GetSession("s1");
  auto code = [](const absl::Status& s) { return s.code(); };
  EXPECT_EQ(code(svc_->EndTurn({"ghost", 1, "grep", std::nullopt, std::nullopt}).status()),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(code(svc_->ToolCallEnded("ghost", std::nullopt).status()), absl::StatusCode::kNotFound);
  EXPECT_EQ(code(svc_->EndSession("ghost").status()), absl::StatusCode::kNotFound);
  EXPECT_EQ(code(svc_->Heartbeat("ghost", {}).status()), absl::StatusCode::kNotFound);
  EXPECT_EQ(code(svc_->Deregister("ghost").status()), absl::StatusCode::kNotFound);
  // Hints: negative and absurd.
  EXPECT_EQ(code(svc_->ToolCallEnded("s1", Seconds(-1)).status()),
            absl::StatusCode::kInvalidArgument);
  absl::Status absurd = svc_->ToolCallEnded("s1", absl::Hours(24 * 365)).status();
  EXPECT_EQ(absurd.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(absurd.message().find("8760h"), std::string::npos) << absurd;
  // Tokens: negative, zero new tokens, absurd.
  EXPECT_EQ(code(svc_->RouteTurn(Turn("s1", -5, 10, 0)).status()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(svc_->RouteTurn(Turn("s1", 5, 0, 0)).status()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(svc_->RouteTurn(Turn("s1", 1LL << 40, 1, 0)).status()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(svc_->RouteTurn(Turn("s1", 5, 5, 0, "othertenant")).status()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(svc_->RouteTurn(Turn("new", 0, 5, 0, "")).status()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(svc_->RouteTurn(Turn("bad id!", 0, 5, 0)).status()),
            absl::StatusCode::kInvalidArgument);
  // A negative prefill-queue wait at EndTurn (with a turn running: s2).
  ASSERT_TRUE(svc_->RouteTurn(Turn("s2", 0, 5, 0)).ok());
  const CoordinatorStats mid = svc_->Stats();
  absl::Status neg = svc_->EndTurn({"s2", 5, "grep", std::nullopt, Seconds(-2)}).status();
  EXPECT_EQ(neg.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(neg.message().find("prefill queue wait -2s"), std::string::npos) << neg;
  EXPECT_EQ(svc_->GetSession("s2")->tier, SessionTier::kActive);
  EXPECT_EQ(svc_->Stats().queue_delay, mid.queue_delay);
  // A reload report with a negative cost or token count.
  for (auto [took, tokens] : {std::pair{Seconds(-1), int64_t{5}}, {Seconds(1), int64_t{-5}}}) {
    EndTurnRequest bad{"s2", 5, "grep", std::nullopt, std::nullopt};
    bad.reload = took;
    bad.reload_tokens = tokens;
    absl::Status st = svc_->EndTurn(bad).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find("reload of"), std::string::npos) << st;
  }
  EXPECT_EQ(svc_->GetSession("s2")->tier, SessionTier::kActive);
  // Duplicate registration: same id, another address.
  absl::Status dup = svc_->RegisterNode(Node("d1", NodeRole::kDecode, 1, 9999)).status();
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists);
  // EndTurn twice (no turn running).
  EXPECT_EQ(code(svc_->EndTurn({"s1", 60, "grep", std::nullopt, std::nullopt}).status()),
            absl::StatusCode::kFailedPrecondition);
  // Nothing changed.
  const CoordinatorStats after = svc_->Stats();
  EXPECT_EQ(after.routes, mid.routes);
  EXPECT_EQ(after.reserved_bytes, mid.reserved_bytes);
  EXPECT_EQ(after.capacity_bytes, before.capacity_bytes);
  EXPECT_EQ(after.sessions_leased, before.sessions_leased);
  EXPECT_EQ(after.tools.size(), before.tools.size());
  const SessionState s1_after = *svc_->GetSession("s1");
  EXPECT_EQ(s1_after.turns, s1.turns);
  EXPECT_EQ(s1_after.lease_expires, s1.lease_expires);
  EXPECT_EQ(s1_after.tier, s1.tier);
  EXPECT_EQ(svc_->ListNodes(NodeRole::kDecode, true).at(0).state.spec.grpc_address,
            "127.0.0.1:7001");
  Invariants();
}

// Many threads route, end turns and sessions against small workers; an observer checks the budgets
// all along; at the end every reservation is accounted for.
TEST_F(CoordinatorServiceTest, BudgetsNeverOverCommittedUnderConcurrency) {
  CoordinatorOptions o = TestOptions();
  o.tenant_budget_bytes = 6000;
  Start(o);
  AddCluster(5000);
  std::atomic<bool> stop{false};
  std::atomic<int> violations{0}, admitted{0}, refused{0};
  std::thread observer([&] {
    while (!stop) {
      std::string why;
      if (!svc_->CheckInvariants(&why)) ++violations;
      for (const NodeView& n : svc_->ListNodes(NodeRole::kDecode, false)) {
        if (n.reserved_bytes > n.state.spec.capacity_bytes) ++violations;
      }
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 200; ++i) {
        std::string sid = absl::StrCat("t", t, "-", i % 5);
        std::string tenant = absl::StrCat("tenant", t % 3);
        absl::StatusOr<RouteResult> r =
            svc_->RouteTurn(Turn(sid, rng() % 300, 1 + rng() % 500, rng() % 300, tenant));
        if (!r.ok()) {
          ++refused;
          continue;
        }
        ++admitted;
        (void)svc_->EndTurn(
            {sid, static_cast<int64_t>(rng() % 600), "tool", std::nullopt, std::nullopt});
        if (rng() % 4 == 0) (void)svc_->EndSession(sid);
      }
    });
  }
  for (auto& th : threads) th.join();
  stop = true;
  observer.join();
  EXPECT_EQ(violations, 0);
  EXPECT_GT(admitted, 0);
  EXPECT_GT(refused, 0);  // the budgets were actually contended
  Invariants();
  CoordinatorStats st = svc_->Stats();
  EXPECT_LE(st.reserved_bytes, st.capacity_bytes);
}

TEST(CoordinatorRestartTest, RocksDbKeepsLeasesMembersAndSamples) {
  auto dir = (std::filesystem::temp_directory_path() /
              ("glimpse_coord_restart_" + std::to_string(::getpid())))
                 .string();
  std::filesystem::remove_all(dir);
  FakeClock clock;
  absl::Time lease_end;
  {
    auto store = RocksStateStore::Open({dir, false});
    ASSERT_TRUE(store.ok());
    auto svc = CoordinatorService::Create(TestOptions(), &clock, store->get());
    ASSERT_TRUE(svc.ok());
    ASSERT_TRUE((*svc)->RegisterNode(Node("d1", NodeRole::kDecode, 10'000, 7001)).ok());
    ASSERT_TRUE((*svc)->RouteTurn(Turn("s1", 0, 100, 10)).ok());
    absl::StatusOr<LeaseResult> l =
        (*svc)->EndTurn({"s1", 110, "grep", std::nullopt, std::nullopt});
    ASSERT_TRUE(l.ok());
    lease_end = l->expires;
    ASSERT_TRUE((*svc)->RouteTurn(Turn("s2", 0, 100, 10)).ok());
    ASSERT_TRUE((*svc)->EndTurn({"s2", 110, "grep", std::nullopt, std::nullopt}).ok());
    ASSERT_TRUE((*svc)->ToolCallEnded("s2", Seconds(3)).ok());
  }
  clock.Advance(Seconds(2));
  auto store = RocksStateStore::Open({dir, false});
  ASSERT_TRUE(store.ok());
  auto svc = CoordinatorService::Create(TestOptions(), &clock, store->get());
  ASSERT_TRUE(svc.ok()) << svc.status();
  absl::StatusOr<SessionState> s1 = (*svc)->GetSession("s1");
  ASSERT_TRUE(s1.ok());
  EXPECT_EQ(s1->tier, SessionTier::kLeased);
  EXPECT_EQ(s1->lease_expires, lease_end);
  EXPECT_EQ(s1->reserved_bytes, 110);
  EXPECT_EQ((*svc)->Stats().reserved_bytes, 220);
  EXPECT_EQ((*svc)->Stats().tools.at(0).samples, 1);
  // The worker re-registers at the same address and the lease is a hot hit.
  auto again = (*svc)->RegisterNode(Node("d1", NodeRole::kDecode, 10'000, 7001));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->reregistered);
  EXPECT_EQ(again->demoted, 0);
  absl::StatusOr<RouteResult> r = (*svc)->RouteTurn(Turn("s1", 110, 10, 10));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->hot_hit);
  std::string why;
  EXPECT_TRUE((*svc)->CheckInvariants(&why)) << why;
  svc->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace glimpse::coordinator

namespace glimpse::coordinator {
namespace {

// A store whose session writes fail while `fail` is set, whose syncs fail while `sync_fails`
// is, and whose disk is nearly full while `full` is.
class FailingStore : public StateStore {
 public:
  std::atomic<bool> fail{false};
  std::atomic<bool> sync_fails{false};
  std::atomic<bool> full{false};
  absl::Status Durable() override {
    return sync_fails ? absl::DataLossError("fsync failed") : absl::OkStatus();
  }
  absl::Status CanWrite() override {
    return full ? absl::ResourceExhaustedError("the disk has 1 MiB free") : absl::OkStatus();
  }
  absl::Status PutNode(const NodeSpec& node) override { return inner_.PutNode(node); }
  absl::Status DeleteNode(const std::string& id) override { return inner_.DeleteNode(id); }
  absl::Status PutSession(const SessionState& session) override {
    if (fail) return absl::UnavailableError("IO error: the disk went away");
    return inner_.PutSession(session);
  }
  absl::Status DeleteSession(const std::string& id) override { return inner_.DeleteSession(id); }
  absl::Status PutEstimator(const std::string& json) override { return inner_.PutEstimator(json); }
  absl::StatusOr<StoredState> Load() override { return inner_.Load(); }

 private:
  MemoryStateStore inner_;
};

// A coordinator on a FailingStore with one decode worker, d1; `failures` counts store failures.
class CoordinatorDurabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions o = TestOptions();
    o.on_store_failure = [this](const absl::Status&) { ++failures; };
    auto created = CoordinatorService::Create(o, &clock, &store);
    ASSERT_TRUE(created.ok()) << created.status();
    svc = *std::move(created);
    ASSERT_TRUE(svc->RegisterNode(Node("d1", NodeRole::kDecode, 10'000, 7001)).ok());
  }
  FakeClock clock;
  FailingStore store;
  int failures = 0;
  std::unique_ptr<CoordinatorService> svc;
};

// A write the store fails fails the call that made it, and the coordinator changes nothing more
// (fail-stop) while it still answers reads; a restart finds the last acknowledged state.
TEST_F(CoordinatorDurabilityTest, AFailedStoreWriteFailsTheCallAndStopsEveryLaterChange) {
  ASSERT_TRUE(svc->RouteTurn(Turn("s1", 0, 500, 100)).ok());
  ASSERT_TRUE(svc->EndTurn({"s1", 550, "grep", std::nullopt, std::nullopt}).ok());

  store.fail = true;
  absl::StatusOr<RouteResult> second = svc->RouteTurn(Turn("s1", 550, 50, 100));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_NE(second.status().message().find("the disk went away"), std::string::npos);
  EXPECT_EQ(failures, 1);
  store.fail = false;  // the disk is back, but nothing is acknowledged until a restart
  EXPECT_EQ(svc->RouteTurn(Turn("s2", 0, 100, 10)).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(svc->RegisterNode(Node("d2", NodeRole::kDecode, 10'000, 7002)).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(svc->Heartbeat("d1", {}).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(failures, 1);
  EXPECT_TRUE(svc->GetSession("s1").ok());  // reads go on
  EXPECT_EQ(svc->ListNodes(std::nullopt, false).size(), 1u);
  EXPECT_EQ(svc->Flush().code(), absl::StatusCode::kUnavailable);
  svc.reset();

  auto again = CoordinatorService::Create(TestOptions(), &clock, &store);
  ASSERT_TRUE(again.ok()) << again.status();
  absl::StatusOr<SessionState> s1 = (*again)->GetSession("s1");
  ASSERT_TRUE(s1.ok()) << s1.status();
  EXPECT_EQ(s1->turns, 1);  // the second turn was never acknowledged
  EXPECT_FALSE((*again)->GetSession("s2").ok());
}

// A nearly full disk refuses new records before anything moves, without stopping the
// coordinator or its heartbeats: once there is room, turns are accepted again.
TEST_F(CoordinatorDurabilityTest, ANearlyFullDiskRefusesChangesAndNothingMoves) {
  store.full = true;
  absl::StatusOr<RouteResult> refused = svc->RouteTurn(Turn("s1", 0, 500, 100));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_FALSE(svc->GetSession("s1").ok());    // no record, no reservation
  EXPECT_TRUE(svc->Heartbeat("d1", {}).ok());  // liveness goes on
  store.full = false;
  EXPECT_TRUE(svc->RouteTurn(Turn("s1", 0, 500, 100)).ok());
  EXPECT_EQ(failures, 0);
}

// An fsync that fails fails the call that waited for it and stops every later change, as a
// failed write does.
TEST_F(CoordinatorDurabilityTest, AFailedSyncFailsTheCallAndStopsLaterChanges) {
  store.sync_fails = true;
  absl::StatusOr<RouteResult> turn = svc->RouteTurn(Turn("s1", 0, 500, 100));
  EXPECT_EQ(turn.status().code(), absl::StatusCode::kUnavailable) << turn.status();
  EXPECT_NE(turn.status().message().find("fsync failed"), std::string::npos);
  store.sync_fails = false;
  EXPECT_EQ(svc->RouteTurn(Turn("s2", 0, 100, 10)).status().code(), absl::StatusCode::kUnavailable);
}

// The same in etcd, and etcd itself SIGKILLed and restarted between the two coordinators: what
// the first acknowledged is what the second loads.
TEST(CoordinatorRestartTest, EtcdKeepsLeasesMembersAndSamplesThroughItsOwnCrash) {
  auto etcd =
      etcd::EtcdProcess::Start(absl::StrCat(::testing::TempDir(), "coord-etcd-", ::getpid()));
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  EtcdStateStoreOptions so;
  so.etcd.endpoints = {(*etcd)->endpoint()};
  FakeClock clock;
  absl::Time lease_end;
  {
    auto store = EtcdStateStore::Create(so);
    ASSERT_TRUE(store.ok()) << store.status();
    auto svc = CoordinatorService::Create(TestOptions(), &clock, store->get());
    ASSERT_TRUE(svc.ok()) << svc.status();
    ASSERT_TRUE((*svc)->RegisterNode(Node("d1", NodeRole::kDecode, 10'000, 7001)).ok());
    ASSERT_TRUE((*svc)->RouteTurn(Turn("s1", 0, 100, 10)).ok());
    absl::StatusOr<LeaseResult> l =
        (*svc)->EndTurn({"s1", 110, "grep", std::nullopt, std::nullopt});
    ASSERT_TRUE(l.ok()) << l.status();
    lease_end = l->expires;
    ASSERT_TRUE((*svc)->RouteTurn(Turn("s2", 0, 100, 10)).ok());
    ASSERT_TRUE((*svc)->EndTurn({"s2", 110, "grep", std::nullopt, std::nullopt}).ok());
    ASSERT_TRUE((*svc)->ToolCallEnded("s2", Seconds(3)).ok());
    ASSERT_TRUE((*svc)->EndSession("s2").ok());
  }
  (*etcd)->Kill();
  ASSERT_TRUE((*etcd)->Restart().ok());
  clock.Advance(Seconds(2));
  auto store = EtcdStateStore::Create(so);
  ASSERT_TRUE(store.ok());
  auto svc = CoordinatorService::Create(TestOptions(), &clock, store->get());
  ASSERT_TRUE(svc.ok()) << svc.status();
  absl::StatusOr<SessionState> s1 = (*svc)->GetSession("s1");
  ASSERT_TRUE(s1.ok()) << s1.status();
  EXPECT_EQ(s1->tier, SessionTier::kLeased);
  EXPECT_EQ(s1->lease_expires, lease_end);
  EXPECT_EQ(s1->reserved_bytes, 110);
  EXPECT_FALSE((*svc)->GetSession("s2").ok());  // ended before the crash
  EXPECT_EQ((*svc)->Stats().reserved_bytes, 110);
  EXPECT_EQ((*svc)->Stats().tools.at(0).samples, 1);
  auto again = (*svc)->RegisterNode(Node("d1", NodeRole::kDecode, 10'000, 7001));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->reregistered);
  absl::StatusOr<RouteResult> r = (*svc)->RouteTurn(Turn("s1", 110, 10, 10));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->hot_hit);
  std::string why;
  EXPECT_TRUE((*svc)->CheckInvariants(&why)) << why;
  // etcd gone: a write is refused (the service fails stop, as on a broken disk), nothing hangs.
  (*etcd)->Kill();
  EXPECT_FALSE((*svc)->EndTurn({"s1", 120, "grep", std::nullopt, std::nullopt}).ok());
}

}  // namespace
}  // namespace glimpse::coordinator
