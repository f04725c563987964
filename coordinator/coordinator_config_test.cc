#include "coordinator/coordinator_config.h"

#include "gtest/gtest.h"

namespace glimpse::coordinator {
namespace {

absl::StatusOr<CoordinatorOptions> Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "glimpse-coordinator");
  absl::StatusOr<Config> c = Config::Parse("glimpse-coordinator", "test", CoordinatorConfigKeys(),
                                           static_cast<int>(args.size()), args.data());
  if (!c.ok()) return c.status();
  return OptionsFromConfig(*c);
}

TEST(CoordinatorConfigTest, DefaultsFollowTheMeasuredFigures) {
  absl::StatusOr<CoordinatorOptions> o = Parse({"--store.path=/tmp/x"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->kv_bytes_per_token, 23850);
  // 23,850 B at 1.18 GB/s (a cold cache-node get) = 20.21 µs per token.
  EXPECT_NEAR(absl::ToDoubleMicroseconds(o->lease.reload.per_token), 20.21, 0.01);
  EXPECT_EQ(o->lease.min_samples, 100);
  EXPECT_EQ(o->lease.pin_cost, PinCost::kPressure);  // bench/RESULTS.md "Coordinator simulation"
  EXPECT_EQ(o->prefill_on_decode_tokens, 128);
}

TEST(CoordinatorConfigTest, TenantBudgetsAndBadValues) {
  absl::StatusOr<CoordinatorOptions> o =
      Parse({"--store.path=/tmp/x", "--budgets.tenants=acme=512MiB,beta=1000"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->tenant_budgets.at("acme"), 512LL << 20);
  EXPECT_EQ(o->tenant_budgets.at("beta"), 1000);
  absl::StatusOr<CoordinatorOptions> bad = Parse({"--store.path=/tmp/x", "--budgets.tenants=acme"});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("acme"), std::string::npos);
  bad = Parse({"--store.path=/tmp/x", "--lease.reload_bandwidth=0"});
  EXPECT_NE(bad.status().message().find("lease.reload_bandwidth"), std::string::npos)
      << bad.status();
  EXPECT_FALSE(Parse({}).ok());  // a store is required: store.path or store.etcd_endpoints
  EXPECT_FALSE(Parse({"--store.path=/tmp/x", "--store.etcd_endpoints=127.0.0.1:2379"}).ok());
  EXPECT_TRUE(Parse({"--store.etcd_endpoints=127.0.0.1:2379,127.0.0.1:22379"}).ok());
  o = Parse({"--store.path=/tmp/x", "--lease.pin_cost=pressure", "--lease.fixed_ttl=5s"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->lease.pin_cost, PinCost::kPressure);
  EXPECT_EQ(o->lease.fixed_ttl, absl::Seconds(5));
  o = Parse({"--store.path=/tmp/x", "--lease.pin_cost=continuum"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->lease.pin_cost, PinCost::kContinuum);
  EXPECT_FALSE(Parse({"--store.path=/tmp/x", "--lease.pin_cost=cheap"}).ok());
  EXPECT_FALSE(Parse({"--store.path=/tmp/x", "--lease.fixed_ttl=-3s"}).ok());
  EXPECT_FALSE(Parse({"--store.path=/tmp/x", "--lease.fixed_ttl=2h"}).ok());  // > max_ttl 10m
}

}  // namespace
}  // namespace glimpse::coordinator
