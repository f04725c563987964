#include "coordinator/membership.h"

#include "gtest/gtest.h"

namespace glimpse::coordinator {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

NodeSpec Decode(const std::string& id, const std::string& addr = "127.0.0.1:7001") {
  return NodeSpec{id, NodeRole::kDecode, addr, "ucx-blob", 1 << 20, ""};
}

TEST(MembershipTest, HeartbeatsKeepNodesAliveAndMissedOnesDeclareThemDead) {
  Membership m({absl::Seconds(1), 3});
  ASSERT_TRUE(m.Register(Decode("d1"), kT0).ok());
  ASSERT_TRUE(m.Register(Decode("d2", "127.0.0.1:7002"), kT0).ok());
  EXPECT_TRUE(m.Sweep(kT0 + absl::Seconds(2)).empty());
  ASSERT_TRUE(m.Heartbeat("d1", {1, 2, 3}, kT0 + absl::Seconds(2)).ok());
  EXPECT_TRUE(m.Sweep(kT0 + absl::Seconds(3)).empty());  // exactly the timeout: still alive
  std::vector<std::string> dead = m.Sweep(kT0 + absl::Seconds(3) + absl::Milliseconds(1));
  EXPECT_EQ(dead, std::vector<std::string>{"d2"});
  EXPECT_TRUE(m.Find("d1")->alive);
  EXPECT_EQ(m.Find("d1")->load.hot_sessions, 3);
  EXPECT_FALSE(m.Find("d2")->alive);
  // A dead node's heartbeat is refused; it registers again.
  absl::Status hb = m.Heartbeat("d2", {}, kT0 + absl::Seconds(4));
  EXPECT_EQ(hb.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(hb.message().find("register again"), std::string::npos) << hb;
  EXPECT_TRUE(m.Register(Decode("d2", "127.0.0.1:7002"), kT0 + absl::Seconds(4)).ok());
  EXPECT_TRUE(m.Find("d2")->alive);
  EXPECT_EQ(m.Sweep(kT0 + absl::Seconds(5) + absl::Milliseconds(1)),
            std::vector<std::string>{"d1"});  // last heartbeat at 2 s
}

TEST(MembershipTest, DuplicateIdAtAnotherAddressIsRefusedAndChangesNothing) {
  Membership m({});
  ASSERT_TRUE(m.Register(Decode("d1"), kT0).ok());
  absl::StatusOr<bool> dup = m.Register(Decode("d1", "10.0.0.9:7001"), kT0 + absl::Seconds(1));
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(dup.status().message().find("127.0.0.1:7001"), std::string::npos) << dup.status();
  EXPECT_EQ(m.Find("d1")->spec.grpc_address, "127.0.0.1:7001");
  EXPECT_EQ(m.Find("d1")->last_heartbeat, kT0);
  NodeSpec other_role = Decode("d1");
  other_role.role = NodeRole::kPrefill;
  EXPECT_EQ(m.Register(other_role, kT0).status().code(), absl::StatusCode::kAlreadyExists);
  // Same address: a restarted worker re-registers.
  absl::StatusOr<bool> again = m.Register(Decode("d1"), kT0 + absl::Seconds(1));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(*again);
}

TEST(MembershipTest, BadSpecsAndUnknownIdsAreClearErrors) {
  Membership m({});
  EXPECT_EQ(m.Register(Decode(""), kT0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Register(Decode("bad id"), kT0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Register(Decode("d1", "nohostport"), kT0).status().code(),
            absl::StatusCode::kInvalidArgument);
  NodeSpec zero = Decode("d1");
  zero.capacity_bytes = 0;
  EXPECT_EQ(m.Register(zero, kT0).status().code(), absl::StatusCode::kInvalidArgument);
  zero.capacity_bytes = -5;
  EXPECT_NE(m.Register(zero, kT0).status().message().find("-5"), std::string::npos);
  EXPECT_TRUE(m.nodes().empty());
  EXPECT_EQ(m.Heartbeat("ghost", {}, kT0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(m.Deregister("ghost").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(m.Register(Decode("d1"), kT0).ok());
  EXPECT_EQ(m.Heartbeat("d1", {-1, 0, 0}, kT0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Find("d1")->load.queue_length, 0);
}

}  // namespace
}  // namespace glimpse::coordinator
