#include "core/worker/hot_sessions.h"

#include <thread>

#include "core/model/test_model.h"
#include "gtest/gtest.h"

namespace glimpse::worker {
namespace {

HotSession MakeSession(int tokens) {
  HotSession s;
  s.session = std::make_unique<model::Sequence>(*model::testing::SharedDefaultModel(),
                                                model::testing::SharedPool());
  std::vector<int32_t> ids(tokens, 42);
  EXPECT_TRUE(s.session->Forward(ids).ok());
  s.tokens = ids;
  return s;
}

TEST(HotSessionsTest, CheckoutIsExclusiveAndReturnKeepsTheSessionHot) {
  HotSessions hot(int64_t{1} << 30, /*reencode_idle=*/true);
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
  HotSessions hot(int64_t{1} << 30, /*reencode_idle=*/true);
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
  HotSessions hot(2 * one, /*reencode_idle=*/true);
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
// MakeRoom first re-encodes idle copies whose format allows it (int8 into kivi4, here about half
// the bytes) and drops none while that makes the room; asked for more, it drops idle copies least
// recently used first. A re-encoded session continues.
TEST(HotSessionsTest, MakeRoomReencodesIdleInt8SessionsBeforeDroppingAny) {
  const model::Model& m = *model::testing::SharedDefaultModel();
  model::KvPool pool(
      {.budget_bytes = int64_t{1} << 30, .page_tokens = 64, .head_dim = m.config().head_dim});
  auto make = [&](kernels::KvDType dtype) {
    HotSession s;
    s.session = std::make_unique<model::Sequence>(
        m, model::testing::SharedPool(),
        model::SequenceOptions{.kv_pool = &pool, .kv_dtype = dtype});
    s.tokens.assign(300, 42);
    EXPECT_TRUE(s.session->Forward(s.tokens).ok());
    return s;
  };
  HotSessions hot(int64_t{1} << 30, /*reencode_idle=*/true);
  for (const auto& [id, dtype] :
       {std::pair{"int8", kernels::KvDType::kI8}, std::pair{"fp16", kernels::KvDType::kF16}}) {
    ASSERT_TRUE(hot.Checkout(id).ok());
    hot.Return(id, make(dtype));
  }
  const int64_t before = hot.Stats().bytes;
  const int64_t free = pool.budget_bytes() - pool.stats().used_bytes;
  hot.MakeRoom(pool, free + 100000);
  HotStats s = hot.Stats();
  EXPECT_EQ(s.reencoded_for_room, 1);
  EXPECT_EQ(s.dropped_for_room, 0);
  EXPECT_EQ(s.sessions, 2);
  EXPECT_LT(s.bytes, before - 100000);
  EXPECT_EQ(s.bytes, pool.stats().used_bytes);  // the bytes went back to the pool
  {
    auto int8 = hot.Checkout("int8");
    ASSERT_TRUE(int8.ok() && int8->has_value());
    EXPECT_EQ((*int8)->session->cache().dtype(), kernels::KvDType::kKivi4);
    const int32_t next = 7;
    EXPECT_TRUE((*int8)->session->Forward(std::span(&next, 1)).ok());  // it continues
    hot.Return("int8", *std::move(*int8));
  }
  // More than re-encoding can give: idle copies go, the least recently used (fp16) first.
  hot.MakeRoom(pool, pool.budget_bytes() - pool.stats().used_bytes + 1);
  s = hot.Stats();
  EXPECT_EQ(s.reencoded_for_room, 1);
  EXPECT_EQ(s.dropped_for_room, 1);
  EXPECT_EQ(s.sessions, 1);
  ASSERT_TRUE(hot.Checkout("int8").ok());
  hot.Abandon("int8");
  EXPECT_EQ(pool.stats().used_bytes, 0);
}

TEST(HotSessionsTest, ACheckoutWaitsForTheRunningTurnOfItsSession) {
  HotSessions hot(int64_t{1} << 30, /*reencode_idle=*/true);
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
}  // namespace glimpse::worker
