// The wire form of a session's eviction policy: decode-time eviction's ranges and defaults.
#include "core/worker/policy.h"

#include "gtest/gtest.h"

namespace glimpse::worker {
namespace {

TEST(PolicyTest, DecodeTimeEvictionNeedsAMethodAndBoundedSettings) {
  Policy snapkv = *ParsePolicy("snapkv", 0.5, "fp16");
  ASSERT_TRUE(SetDecodeEviction(snapkv, 256, 0).ok());
  EXPECT_EQ(snapkv.decode_budget_tokens, 256);
  EXPECT_EQ(snapkv.decode_interval, eviction::kDefaultDecodeInterval);
  ASSERT_TRUE(SetDecodeEviction(snapkv, 128, 16).ok());
  EXPECT_EQ(snapkv.decode_interval, 16);

  Policy none = *ParsePolicy("", 1.0, "fp16");
  EXPECT_TRUE(SetDecodeEviction(none, 0, 0).ok());
  const absl::Status without_method = SetDecodeEviction(none, 64, 0);
  EXPECT_EQ(without_method.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(without_method.message().find("policy.method"), std::string::npos);

  for (const auto& [budget, interval] : {std::pair<int64_t, int64_t>{-1, 0},
                                         {kMaxDecodeBudgetTokens + 1, 0},
                                         {64, -1},
                                         {64, 5000}}) {
    Policy p = snapkv;
    EXPECT_EQ(SetDecodeEviction(p, budget, interval).code(), absl::StatusCode::kInvalidArgument)
        << budget << " every " << interval;
    EXPECT_EQ(p.decode_budget_tokens, snapkv.decode_budget_tokens) << "unchanged on error";
  }
}

}  // namespace
}  // namespace glimpse::worker
