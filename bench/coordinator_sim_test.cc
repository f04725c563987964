#include "bench/coordinator_sim.h"

#include "gtest/gtest.h"

namespace glimpse::coordinator::sim {
namespace {

const Figures kFigures{545, 93, 1.69e9, 23850};

std::vector<SessionSpec> Small() {
  WorkloadOptions w;
  w.sessions = 40;
  w.seed = 7;
  return MakeWorkload(w);
}

TEST(CoordinatorSimTest, WorkloadIsDeterministicAndWellFormed) {
  std::vector<SessionSpec> a = Small(), b = Small();
  ASSERT_EQ(a.size(), 40u);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].turns.size(), b[i].turns.size());
    EXPECT_EQ(a[i].arrival_s, b[i].arrival_s);
    EXPECT_GE(a[i].turns.size(), 3u);
    EXPECT_EQ(a[i].turns.back().tool, "");
    for (size_t k = 0; k + 1 < a[i].turns.size(); ++k) EXPECT_GT(a[i].turns[k].tool_s, 0);
  }
}

TEST(CoordinatorSimTest, EverySessionCompletesUnderEveryPolicy) {
  for (ReloadMode mode : {ReloadMode::kTransfer, ReloadMode::kRecompute}) {
    ClusterOptions cluster;
    cluster.reload = mode;
    cluster.decode_capacity_bytes = int64_t{128} << 20;
    for (const Policy& p :
         {Policy{"evict", absl::ZeroDuration()}, Policy{"ttl", absl::Seconds(30)},
          Policy{"estimator", std::nullopt}, Policy{"estimator-pressure", std::nullopt, true}}) {
      absl::StatusOr<Result> r = Simulate(Small(), cluster, kFigures, p);
      ASSERT_TRUE(r.ok()) << p.name << ": " << r.status();
      EXPECT_EQ(r->sessions_done + r->sessions_refused, 40) << p.name;
      EXPECT_GT(r->jct_mean_s, 0);
      EXPECT_LE(r->ttft_p50_s, r->ttft_p99_s);
      if (p.fixed_ttl == absl::ZeroDuration()) {
        EXPECT_EQ(r->hot_rate, 0) << p.name;
      }
      // Same inputs, same answer.
      absl::StatusOr<Result> again = Simulate(Small(), cluster, kFigures, p);
      EXPECT_EQ(again->jct_mean_s, r->jct_mean_s);
    }
  }
}

// The bound the bench prints ("no lease policy beats evict by more than ..."): with memory to
// spare and no lease ending, every later turn is hot and no session finishes later than under
// any policy on the real cluster.
TEST(CoordinatorSimTest, AllHotBoundsEveryPolicy) {
  for (ReloadMode mode : {ReloadMode::kTransfer, ReloadMode::kRecompute}) {
    ClusterOptions cluster;
    cluster.reload = mode;
    cluster.decode_capacity_bytes = int64_t{128} << 20;
    absl::StatusOr<Result> bound = SimulateAllHot(Small(), cluster, kFigures);
    ASSERT_TRUE(bound.ok()) << bound.status();
    EXPECT_EQ(bound->hot_rate, 1);
    EXPECT_EQ(bound->sessions_done, 40);
    EXPECT_EQ(bound->queue_wait_mean_s, 0);
    for (const Policy& p : {Policy{"evict", absl::ZeroDuration()}, Policy{"ttl", absl::Seconds(60)},
                            Policy{"estimator-pressure", std::nullopt, true}}) {
      absl::StatusOr<Result> r = Simulate(Small(), cluster, kFigures, p);
      ASSERT_TRUE(r.ok()) << p.name << ": " << r.status();
      EXPECT_LE(bound->jct_mean_s, r->jct_mean_s) << p.name;
      EXPECT_LE(bound->ttft_mean_s, r->ttft_mean_s) << p.name;
    }
  }
}

}  // namespace
}  // namespace glimpse::coordinator::sim
