#include "coordinator/lease_estimator.h"

#include <algorithm>
#include <map>
#include <string>

#include "gtest/gtest.h"

namespace glimpse::coordinator {
namespace {

// J(tau) = F(tau)·G − tau over {0, 1, 2, 3, 10} with F = 0, .25, .5, .75, 1.
TEST(ArgmaxTtlTest, HandComputedDistributions) {
  const std::vector<double> s = {1, 2, 3, 10};
  // G = 5: J = 0, .25, .5, .75, −5 → 3.
  ArgmaxResult r = ArgmaxTtl(s, 5, 1e9);
  EXPECT_DOUBLE_EQ(r.tau_s, 3);
  EXPECT_DOUBLE_EQ(r.f, 0.75);
  // G = 20: J = 0, 4, 8, 12, 10 → 3.
  EXPECT_DOUBLE_EQ(ArgmaxTtl(s, 20, 1e9).tau_s, 3);
  // G = 50: J = 0, 11.5, 23, 34.5, 40 → 10.
  EXPECT_DOUBLE_EQ(ArgmaxTtl(s, 50, 1e9).tau_s, 10);
  // G = 1: every J < 0 → 0 (evict at turn end).
  EXPECT_DOUBLE_EQ(ArgmaxTtl(s, 1, 1e9).tau_s, 0);
  // G = 4: J = 0, 0, 0, 0, −6: ties go to the shorter lease → 0.
  EXPECT_DOUBLE_EQ(ArgmaxTtl(s, 4, 1e9).tau_s, 0);
  // Equal samples: F is evaluated after the last of them. {2,2,2,8}, G = 4: J(2) = 1 → 2.
  r = ArgmaxTtl({2, 2, 2, 8}, 4, 1e9);
  EXPECT_DOUBLE_EQ(r.tau_s, 2);
  EXPECT_DOUBLE_EQ(r.f, 0.75);
  // The cap: G = 50 wants 10, max 5 → the best candidate under it, 3.
  r = ArgmaxTtl(s, 50, 5);
  EXPECT_DOUBLE_EQ(r.tau_s, 3);
  EXPECT_TRUE(r.capped);
  EXPECT_DOUBLE_EQ(ArgmaxTtl({}, 100, 1e9).tau_s, 0);
}

TEST(ArgmaxTtlTest, CostWeightOnTau) {
  const std::vector<double> s = {1, 2, 3, 10};
  // G = 5, c = 0.1: J = 0, 1.15, 2.3, 3.45, 4 → 10.
  EXPECT_DOUBLE_EQ(ArgmaxTtl(s, 5, 1e9, 0.1).tau_s, 10);
  // G = 5, c = 2: J = 0, −0.75, −1.5, −2.25, −15 → 0.
  EXPECT_DOUBLE_EQ(ArgmaxTtl(s, 5, 1e9, 2).tau_s, 0);
}

TEST(EtaTest, ContinuumEtaFromTurnCounts) {
  // Every session has 3 turns: (i, N−i) = (1,2), (2,1), (3,0) → corr −1 → eta 1.
  EXPECT_NEAR(*EtaFromTurnHistogram({{3, 10}}), 1.0, 1e-12);
  // One 1-turn and one 3-turn session: pairs (1,0), (1,2), (2,1), (3,0); cov = −0.3125,
  // var = 0.6875 each → eta = 0.3125 / 0.6875.
  EXPECT_NEAR(*EtaFromTurnHistogram({{1, 1}, {3, 1}}), 0.3125 / 0.6875, 1e-12);
  EXPECT_FALSE(EtaFromTurnHistogram({{1, 5}}).has_value());  // no variance
  EXPECT_FALSE(EtaFromTurnHistogram({}).has_value());
}

LeaseEstimatorOptions TestOptions() {
  LeaseEstimatorOptions o;
  o.min_samples = 4;
  o.default_ttl = absl::Seconds(7);
  o.max_ttl = absl::Seconds(60);
  o.default_queue_delay = absl::Seconds(2);
  o.reload = ReloadCost{absl::ZeroDuration(), absl::Milliseconds(1)};  // R(n) = n ms
  o.pin_cost = PinCost::kContinuum;  // c = 1 unless a test says otherwise
  return o;
}

TEST(LeaseEstimatorTest, ChoosesFromSamplesHintPooledOrDefault) {
  LeaseEstimator e(TestOptions());
  // Nothing known: the default.
  TtlDecision d = e.Choose({"", "grep"}, 1000, std::nullopt);
  EXPECT_EQ(d.ttl, absl::Seconds(7));
  EXPECT_EQ(d.source, "default");
  for (int s : {1, 2, 3, 10}) e.ObserveToolDuration({"", "grep"}, absl::Seconds(s));
  // G = Q·eta + R = 2·1 + 3 = 5 → tau 3 (see ArgmaxTtlTest).
  d = e.Choose({"", "grep"}, 3000, std::nullopt);
  EXPECT_EQ(d.ttl, absl::Seconds(3));
  EXPECT_EQ(d.source, "estimator");
  EXPECT_DOUBLE_EQ(d.reuse_probability, 0.75);
  EXPECT_DOUBLE_EQ(d.gain_s, 5);
  // G = 2 + 1 = 3 → every J < 0 → 0.
  EXPECT_EQ(e.Choose({"", "grep"}, 1000, std::nullopt).ttl, absl::ZeroDuration());
  // A tool with too few samples: a hint is a point mass at hint·1.2 → pinned when G > 1.2 s.
  e.ObserveToolDuration({"", "tests"}, absl::Seconds(30));
  d = e.Choose({"", "tests"}, 3000, absl::Seconds(1));
  EXPECT_EQ(d.source, "hint");
  EXPECT_EQ(d.ttl, absl::Milliseconds(1200));
  EXPECT_EQ(e.Choose({"", "tests"}, 3000, absl::Seconds(10)).ttl, absl::ZeroDuration());
  // Without a hint: the pooled samples {1, 2, 3, 10, 30}, G = 5 + 5 = 10: J(3) = 3, J(10) = −2 → 3.
  d = e.Choose({"", "tests"}, 8000, std::nullopt);
  EXPECT_EQ(d.source, "pooled");
  EXPECT_EQ(d.ttl, absl::Seconds(3));
}

TEST(LeaseEstimatorTest, QueueDelayEtaAndReuseProbability) {
  LeaseEstimatorOptions o = TestOptions();
  o.queue_window = 2;
  o.min_sessions_for_eta = 2;
  LeaseEstimator e(o);
  EXPECT_EQ(e.QueueDelay(), absl::Seconds(2));  // the default until observed
  e.ObserveQueueDelay(absl::Seconds(9));
  e.ObserveQueueDelay(absl::Seconds(1));
  e.ObserveQueueDelay(absl::Seconds(3));  // window of 2: mean of 1 and 3
  EXPECT_EQ(e.QueueDelay(), absl::Seconds(2));
  // Reported prefill-queue waits of reloads add their own mean: Q = 2 + (4 + 6) / 2.
  e.ObservePrefillQueueDelay(absl::Seconds(4));
  e.ObservePrefillQueueDelay(absl::Seconds(6));
  EXPECT_EQ(e.QueueDelay(), absl::Seconds(7));
  EXPECT_DOUBLE_EQ(e.Eta(), 1.0);  // default
  e.ObserveSessionEnd(1);
  e.ObserveSessionEnd(3);
  EXPECT_NEAR(e.Eta(), 0.3125 / 0.6875, 1e-12);
  for (int s : {1, 2, 3, 10}) e.ObserveToolDuration({"", "grep"}, absl::Seconds(s));
  // P(d <= 3 | d > 1.5) = (0.75 − 0.25) / 0.75.
  EXPECT_NEAR(e.ReuseProbability({"", "grep"}, absl::Milliseconds(1500), absl::Seconds(3), -1),
              2.0 / 3, 1e-12);
  EXPECT_DOUBLE_EQ(e.ReuseProbability({"", "grep"}, absl::Seconds(11), absl::Seconds(20), -1), 0);
  LeaseEstimator fresh(o);
  EXPECT_DOUBLE_EQ(
      fresh.ReuseProbability({"", "grep"}, absl::ZeroDuration(), absl::Seconds(3), 0.5), 0.5);
}

TEST(LeaseEstimatorTest, ExpectedHoldIsTheConditionalMeanTimeToTheTurnOrTheLeaseEnd) {
  LeaseEstimator e(TestOptions());
  for (int s : {1, 2, 3, 10}) e.ObserveToolDuration({"", "grep"}, absl::Seconds(s));
  // 1.5 s into a 3 s lease: the turn comes at 2 or 3 s, or after the lease (10 s) → held 0.5,
  // 1.5 and 1.5 s more: mean 3.5 / 3.
  EXPECT_NEAR(absl::ToDoubleSeconds(
                  e.ExpectedHold({"", "grep"}, absl::Milliseconds(1500), absl::Seconds(3))),
              3.5 / 3, 1e-9);
  // Every sample past the lease end: held to the end.
  EXPECT_EQ(e.ExpectedHold({"", "grep"}, absl::ZeroDuration(), absl::Milliseconds(500)),
            absl::Milliseconds(500));
  // Past every sample, or no distribution at all: what is left of the lease.
  EXPECT_EQ(e.ExpectedHold({"", "grep"}, absl::Seconds(11), absl::Seconds(20)), absl::Seconds(9));
  LeaseEstimator fresh(TestOptions());
  EXPECT_EQ(fresh.ExpectedHold({"", "grep"}, absl::Seconds(1), absl::Seconds(4)), absl::Seconds(3));
  EXPECT_EQ(fresh.ExpectedHold({"", "grep"}, absl::Seconds(5), absl::Seconds(4)),
            absl::ZeroDuration());
}

TEST(LeaseEstimatorTest, FixedTtlAndPressureWeightedPinCost) {
  LeaseEstimatorOptions o = TestOptions();
  o.fixed_ttl = absl::Seconds(4);
  LeaseEstimator fixed(o);
  for (int s : {1, 2, 3, 10}) fixed.ObserveToolDuration({"", "grep"}, absl::Seconds(s));
  TtlDecision d = fixed.Choose({"", "grep"}, 3000, absl::Seconds(1));
  EXPECT_EQ(d.ttl, absl::Seconds(4));
  EXPECT_EQ(d.source, "fixed");

  o = TestOptions();
  o.pin_cost = PinCost::kPressure;
  o.reclaimable = false;  // leases that are never demoted: c is the measured share of waits
  o.pressure_window = 4;
  LeaseEstimator e(o);
  for (int s : {1, 2, 3, 10}) e.ObserveToolDuration({"", "grep"}, absl::Seconds(s));
  EXPECT_DOUBLE_EQ(e.PinCostWeight(), 0.01);  // no admissions seen: the floor
  // G = 2 + 3 = 5, c = 0.01: J(10) = 5 − 0.1 is the best → 10 (Continuum's c = 1 gives 3).
  EXPECT_EQ(e.Choose({"", "grep"}, 3000, std::nullopt).ttl, absl::Seconds(10));
  for (bool p : {true, true, true, true, false}) e.ObserveAdmission(p);  // window 4: 3 of 4
  EXPECT_DOUBLE_EQ(e.PinCostWeight(), 0.75);
  // c = 0.75: J = 0, 0.5, 1, 1.5, −2.5 → 3.
  TtlDecision p = e.Choose({"", "grep"}, 3000, std::nullopt);
  EXPECT_EQ(p.ttl, absl::Seconds(3));
  EXPECT_DOUBLE_EQ(p.pin_cost, 0.75);
  LeaseEstimator continuum(TestOptions());
  continuum.ObserveAdmission(false);
  EXPECT_DOUBLE_EQ(continuum.PinCostWeight(), 1.0);
}

// Reclaimable leases (demoted when memory is needed): no admission waits for them, so c is the
// Jeffreys posterior mean of a share seen 0 times in W admissions, 0.5 / (W + 1), whatever the
// admissions' own waits were.
TEST(LeaseEstimatorTest, ReclaimableLeasesPinCostIsJeffreysMeanOfZeroWaits) {
  LeaseEstimatorOptions o = TestOptions();
  o.pin_cost = PinCost::kPressure;
  o.pressure_window = 4;
  LeaseEstimator e(o);
  EXPECT_DOUBLE_EQ(e.PinCostWeight(), 0.5);  // W = 0: the prior's mean
  for (bool p : {true, false, true}) e.ObserveAdmission(p);
  EXPECT_DOUBLE_EQ(e.PinCostWeight(), 0.125);  // W = 3
  for (bool p : {true, true, true}) e.ObserveAdmission(p);
  EXPECT_DOUBLE_EQ(e.PinCostWeight(), 0.1);  // the window holds 4
  for (int s : {1, 2, 3, 10}) e.ObserveToolDuration({"", "grep"}, absl::Seconds(s));
  // G = 2 + 3 = 5, c = 0.1: J = 0, 1.15, 2.2, 3.45, 4 → 10.
  TtlDecision d = e.Choose({"", "grep"}, 3000, std::nullopt);
  EXPECT_EQ(d.ttl, absl::Seconds(10));
  EXPECT_DOUBLE_EQ(d.pin_cost, 0.1);
  EXPECT_EQ(d.source, "estimator");
}

// No distribution at all (no tool, no pooled samples, no hint): reclaimable leases under the
// pressure cost get the ski-rental break-even lease G / c; otherwise default_ttl (7 s here).
TEST(LeaseEstimatorTest, NoDataFallbackIsBreakEvenOnlyForReclaimablePressureLeases) {
  LeaseEstimatorOptions o = TestOptions();
  o.pin_cost = PinCost::kPressure;
  o.pressure_window = 256;
  LeaseEstimator e(o);
  // G = Q·eta + R = 2·1 + 3 = 5 s, c = 0.5 (no admissions) → 10 s.
  TtlDecision d = e.Choose({"", "grep"}, 3000, std::nullopt);
  EXPECT_EQ(d.ttl, absl::Seconds(10));
  EXPECT_EQ(d.source, "break-even");
  EXPECT_DOUBLE_EQ(d.gain_s, 5);
  for (int i = 0; i < 9; ++i) e.ObserveAdmission(false);
  // c = 0.5 / 10 = 0.05 → G / c = 100 s, over max_ttl (60 s).
  d = e.Choose({"", "grep"}, 3000, std::nullopt);
  EXPECT_EQ(d.ttl, absl::Seconds(60));
  EXPECT_EQ(d.source, "break-even+capped");
  // G = 2 + 0.5 = 2.5 s → 50 s.
  EXPECT_EQ(e.Choose({"", "grep"}, 500, std::nullopt).ttl, absl::Seconds(50));
  // A hint still comes first: a point mass at 1.2 s, worth it (5 − 0.05·1.2 > 0).
  EXPECT_EQ(e.Choose({"", "grep"}, 3000, absl::Seconds(1)).ttl, absl::Milliseconds(1200));

  o.reclaimable = false;  // a commitment: the configured default
  LeaseEstimator committed(o);
  d = committed.Choose({"", "grep"}, 3000, std::nullopt);
  EXPECT_EQ(d.ttl, absl::Seconds(7));
  EXPECT_EQ(d.source, "default");
  o = TestOptions();  // Continuum's c = 1 keeps its default as well
  EXPECT_EQ(LeaseEstimator(o).Choose({"", "grep"}, 3000, std::nullopt).ttl, absl::Seconds(7));
}

TEST(LeaseEstimatorTest, JsonRoundTripKeepsDecisions) {
  LeaseEstimator e(TestOptions());
  for (int s : {1, 2, 3, 10}) e.ObserveToolDuration({"", "grep"}, absl::Seconds(s));
  e.ObserveQueueDelay(absl::Seconds(4));
  e.ObservePrefillQueueDelay(absl::Seconds(1));
  e.ObserveSessionEnd(3);
  LeaseEstimator back(TestOptions());
  ASSERT_TRUE(back.RestoreFromJson(e.SerializeToJson()).ok());
  EXPECT_EQ(back.Choose({"", "grep"}, 1000, std::nullopt).ttl,
            e.Choose({"", "grep"}, 1000, std::nullopt).ttl);
  EXPECT_EQ(back.QueueDelay(), absl::Seconds(5));
  EXPECT_EQ(back.Tools().size(), 1u);
  EXPECT_EQ(back.RestoreFromJson("{not json").code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(back.RestoreFromJson(R"({"version":1,"tools":3})").code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(back.RestoreFromJson(R"({"version":2,"tools":[["t"]]})").code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(back.Tools().size(), 1u);  // a failed restore changes nothing
}

// Tools are per tenant: the same name means each tenant's own distribution.
TEST(LeaseEstimatorTest, EachTenantsToolHasItsOwnDistribution) {
  LeaseEstimator e(TestOptions());
  for (int s : {1, 1, 1, 1}) e.ObserveToolDuration({"fast", "grep"}, absl::Seconds(s));
  for (int s : {40, 40, 40, 40}) e.ObserveToolDuration({"slow", "grep"}, absl::Seconds(s));
  EXPECT_EQ(e.Choose({"fast", "grep"}, 100'000, std::nullopt).ttl, absl::Seconds(1));
  EXPECT_EQ(e.Choose({"slow", "grep"}, 100'000, std::nullopt).ttl, absl::Seconds(40));
  EXPECT_EQ(e.Tools().size(), 2u);
}

// A tenant that names 10,000 tools keeps its newest max_tools_per_tenant; the others' tools stay,
// and all tools together stay within max_tools.
TEST(LeaseEstimatorTest, ToolsAreBoundedPerTenantAndInAll) {
  LeaseEstimatorOptions o = TestOptions();
  o.max_tools_per_tenant = 8;
  o.max_tools = 12;
  LeaseEstimator e(o);
  for (int s : {1, 2, 3, 10}) e.ObserveToolDuration({"calm", "grep"}, absl::Seconds(s));
  for (int i = 0; i < 10'000; ++i) {
    e.ObserveToolDuration({"noisy", "tool" + std::to_string(i)}, absl::Seconds(1));
  }
  std::map<std::string, int> per_tenant;
  for (const LeaseEstimator::ToolSummary& t : e.Tools()) ++per_tenant[t.tool.tenant];
  EXPECT_EQ(per_tenant["noisy"], 8);
  EXPECT_EQ(per_tenant["calm"], 1);
  EXPECT_EQ(e.Choose({"calm", "grep"}, 1000, std::nullopt).source, "estimator");
  for (const std::string tenant : {"a", "b", "c", "d"}) {
    e.ObserveToolDuration({tenant, "x"}, absl::Seconds(1));
  }
  EXPECT_EQ(e.Tools().size(), 12u);  // calm's grep (least recent) went first
  EXPECT_EQ(e.Choose({"calm", "grep"}, 1000, std::nullopt).source, "pooled");
  // The bounds hold through persistence, and tenants come back.
  LeaseEstimator back(o);
  ASSERT_TRUE(back.RestoreFromJson(e.SerializeToJson()).ok());
  EXPECT_EQ(back.Tools().size(), 12u);
  const std::vector<LeaseEstimator::ToolSummary> tools = back.Tools();
  EXPECT_TRUE(std::any_of(tools.begin(), tools.end(), [](const auto& t) {
    return t.tool == ToolKey{"noisy", "tool9999"} && t.samples == 1;
  }));
}

TEST(LeaseEstimatorTest, ReloadCostIsFittedToReportedReloads) {
  LeaseEstimatorOptions o = TestOptions();
  o.reload = ReloadCost{absl::Milliseconds(1), absl::Microseconds(10)};
  LeaseEstimator e(o);
  // Fewer than min_reload_samples (3): the configured cost.
  e.ObserveReload(1000, absl::Milliseconds(300));
  e.ObserveReload(2000, absl::Milliseconds(500));
  EXPECT_EQ(e.ReloadCostOf(1000), absl::Milliseconds(11));
  // On the line 0.1 s + 0.2 ms per token: fitted exactly.
  e.ObserveReload(3000, absl::Milliseconds(700));
  EXPECT_NEAR(absl::ToDoubleSeconds(e.ReloadCostOf(500)), 0.2, 1e-9);
  EXPECT_NEAR(absl::ToDoubleSeconds(e.ReloadCostOf(0)), 0.1, 1e-9);
  // The fitted cost is the gain: a break-even lease grows with it.
  LeaseEstimator back(o);
  ASSERT_TRUE(back.RestoreFromJson(e.SerializeToJson()).ok());
  EXPECT_EQ(back.ReloadCostOf(500), e.ReloadCostOf(500));
}

TEST(LeaseEstimatorTest, ReloadFitNeverGoesNegative) {
  // Larger reloads measured cheaper (noise): no negative per-token cost, the mean instead.
  ReloadFit f = FitReloads({{100, 0.5}, {200, 0.4}, {300, 0.3}});
  EXPECT_DOUBLE_EQ(f.per_token_s, 0.0);
  EXPECT_NEAR(f.fixed_s, 0.4, 1e-12);
  // A line through a negative intercept: through the origin instead.
  f = FitReloads({{100, 0.05}, {200, 0.3}, {300, 0.55}});
  EXPECT_DOUBLE_EQ(f.fixed_s, 0.0);
  EXPECT_GT(f.per_token_s, 0.0);
  // One size only: a constant.
  f = FitReloads({{100, 0.2}, {100, 0.4}});
  EXPECT_NEAR(f.fixed_s, 0.3, 1e-12);
  EXPECT_DOUBLE_EQ(f.per_token_s, 0.0);
}

}  // namespace
}  // namespace glimpse::coordinator
