#include "coordinator/budgets.h"

#include "gtest/gtest.h"

namespace glimpse::coordinator {
namespace {

TEST(BudgetLedgerTest, WorkerCapacityIsNeverExceeded) {
  BudgetLedger b(0);
  b.SetWorkerCapacity("d1", 100);
  ASSERT_TRUE(b.Reserve("s1", "d1", "t", 60).ok());
  absl::Status full = b.Reserve("s2", "d1", "t", 50);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("40 of 100"), std::string::npos) << full;
  EXPECT_EQ(b.Find("s2"), nullptr);
  ASSERT_TRUE(b.Reserve("s2", "d1", "t", 40).ok());
  EXPECT_EQ(b.WorkerFree("d1"), 0);
  // Growing s1 needs room; shrinking always fits.
  EXPECT_FALSE(b.Reserve("s1", "d1", "t", 61).ok());
  EXPECT_EQ(b.Find("s1")->bytes, 60);
  ASSERT_TRUE(b.Reserve("s1", "d1", "t", 10).ok());
  EXPECT_EQ(b.WorkerReserved("d1"), 50);
  EXPECT_EQ(b.Release("s1"), 10);
  EXPECT_EQ(b.Release("s1"), 0);
  std::string why;
  EXPECT_TRUE(b.CheckInvariants(&why)) << why;
}

TEST(BudgetLedgerTest, TenantLimitsAndMovesBetweenWorkers) {
  BudgetLedger b(/*default_tenant_limit=*/100);
  b.SetTenantLimit("big", 1000);
  b.SetWorkerCapacity("d1", 500);
  b.SetWorkerCapacity("d2", 500);
  ASSERT_TRUE(b.Reserve("s1", "d1", "small", 80).ok());
  absl::Status over = b.Reserve("s2", "d2", "small", 30);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("tenant small"), std::string::npos) << over;
  ASSERT_TRUE(b.Reserve("s3", "d2", "big", 400).ok());
  // Move s1 from d1 to d2: its old bytes are freed on d1.
  ASSERT_TRUE(b.Reserve("s1", "d2", "small", 90).ok());
  EXPECT_EQ(b.WorkerReserved("d1"), 0);
  EXPECT_EQ(b.WorkerReserved("d2"), 490);
  EXPECT_EQ(b.TenantReserved("small"), 90);
  EXPECT_EQ(b.Reserve("s9", "nowhere", "big", 1).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(b.Reserve("s9", "d1", "big", -1).code(), absl::StatusCode::kInvalidArgument);
  std::vector<std::string> gone = b.RemoveWorker("d2");
  EXPECT_EQ(gone.size(), 2u);
  EXPECT_EQ(b.TenantReserved("small"), 0);
  std::string why;
  EXPECT_TRUE(b.CheckInvariants(&why)) << why;
}

}  // namespace
}  // namespace glimpse::coordinator
