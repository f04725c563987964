#include "decode-worker/hot_sessions.h"

#include <thread>

#include "core/model/test_model.h"
#include "gtest/gtest.h"

namespace glimpse::decode_worker {
namespace {

HotSession MakeSession(int tokens) {
  HotSession s;
  s.session = std::make_unique<model::Session>(*model::testing::SharedDefaultModel(),
                                               model::testing::SharedPool());
  std::vector<int32_t> ids(tokens, 42);
  EXPECT_TRUE(s.session->Forward(ids).ok());
  s.tokens = ids;
  return s;
}

TEST(HotSessionsTest, CheckoutIsExclusiveAndReturnKeepsTheSessionHot) {
  HotSessions hot(int64_t{1} << 30);
  auto first = hot.Checkout("a");
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->has_value());  // never seen: nothing hot
  EXPECT_EQ(hot.Checkout("a").status().code(), absl::StatusCode::kFailedPrecondition);
  HotSession s = MakeSession(4);
  const int64_t bytes = s.bytes();
  hot.Return("a", std::move(s));
  EXPECT_EQ(hot.Stats().sessions, 1);
  EXPECT_EQ(hot.Stats().bytes, bytes);
  auto again = hot.Checkout("a");
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->tokens.size(), 4u);
  EXPECT_EQ(hot.Stats().bytes, 0);
  hot.Abandon("a");
  EXPECT_EQ(hot.Stats().sessions, 0);
}

TEST(HotSessionsTest, ReleaseDropsIdleSessionsAndBusyOnesAtReturn) {
  HotSessions hot(int64_t{1} << 30);
  ASSERT_TRUE(hot.Checkout("a").ok());
  hot.Return("a", MakeSession(3));
  EXPECT_GT(hot.Release("a"), 0);
  EXPECT_EQ(hot.Release("a"), 0);
  EXPECT_EQ(hot.Stats().sessions, 0);

  ASSERT_TRUE(hot.Checkout("b").ok());
  EXPECT_EQ(hot.Release("b"), 0);  // busy: dropped when returned
  hot.Return("b", MakeSession(3));
  EXPECT_EQ(hot.Stats().sessions, 0);
  EXPECT_EQ(hot.Stats().bytes, 0);
}

TEST(HotSessionsTest, OverCapacityDropsTheLeastRecentlyUsedIdleSession) {
  const int64_t one = MakeSession(8).bytes();
  HotSessions hot(2 * one);
  for (const char* id : {"a", "b"}) {
    ASSERT_TRUE(hot.Checkout(id).ok());
    hot.Return(id, MakeSession(8));
  }
  ASSERT_TRUE(hot.Checkout("a").ok());  // a is now the most recent
  hot.Return("a", MakeSession(8));
  ASSERT_TRUE(hot.Checkout("c").ok());
  hot.Return("c", MakeSession(8));
  EXPECT_EQ(hot.Stats().sessions, 2);
  auto b = hot.Checkout("b");
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->has_value());  // b was dropped
  auto a = hot.Checkout("a");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->has_value());
}

// The next turn of a session whose previous turn still runs waits for it and gets its hot copy.
TEST(HotSessionsTest, ACheckoutWaitsForTheRunningTurnOfItsSession) {
  HotSessions hot(int64_t{1} << 30);
  ASSERT_TRUE(hot.Checkout("a").ok());
  std::optional<absl::StatusOr<std::optional<HotSession>>> waited;
  std::thread next([&] { waited = hot.Checkout("a", absl::Hours(1)); });
  hot.Return("a", MakeSession(4));
  next.join();
  ASSERT_TRUE(waited->ok()) << waited->status();
  ASSERT_TRUE((*waited)->has_value());
  EXPECT_EQ((**waited)->tokens.size(), 4u);
}

}  // namespace
}  // namespace glimpse::decode_worker
