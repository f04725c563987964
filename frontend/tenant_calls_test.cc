// TenantCalls: each tenant has its own limit of calls in flight, a slot ends with its scope, and a
// call past the limit is refused naming the tenant without changing the count.
#include "frontend/tenant_calls.h"

#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glimpse::frontend {
namespace {

using ::testing::HasSubstr;

TEST(TenantCallsTest, EachTenantHasItsOwnLimitAndASlotEndsWithItsScope) {
  TenantCalls calls(2);
  std::vector<TenantCalls::Slot> acme;
  acme.push_back(*calls.Enter("acme"));
  acme.push_back(*calls.Enter("acme"));
  absl::StatusOr<TenantCalls::Slot> third = calls.Enter("acme");
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.status().message(), HasSubstr("tenant acme has 2 Generate calls in flight"));
  EXPECT_EQ(calls.InFlight("acme"), 2);
  {
    absl::StatusOr<TenantCalls::Slot> beta = calls.Enter("beta");  // acme's burst does not count
    ASSERT_TRUE(beta.ok());
    EXPECT_EQ(calls.InFlight("beta"), 1);
  }
  EXPECT_EQ(calls.InFlight("beta"), 0);
  acme.pop_back();
  EXPECT_EQ(calls.InFlight("acme"), 1);
  EXPECT_TRUE(calls.Enter("acme").ok());
  acme.clear();
  EXPECT_EQ(calls.InFlight("acme"), 0);
}

TEST(TenantCallsTest, ZeroMeansNoLimit) {
  TenantCalls calls(0);
  std::vector<TenantCalls::Slot> slots;
  for (int i = 0; i < 1000; ++i) slots.push_back(*calls.Enter("acme"));
  EXPECT_EQ(calls.InFlight("acme"), 1000);
}

}  // namespace
}  // namespace glimpse::frontend
