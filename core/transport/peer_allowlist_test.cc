#include "core/transport/peer_allowlist.h"

#include "core/transport/loopback/loopback_transport.h"
#include "core/transport/testing/fixed_peers.h"
#include "core/transport/ucx/ucx_wire.h"
#include "gtest/gtest.h"

namespace glimpse::transport {
namespace {

absl::Status Ship(Transport& from, Transport& to) {
  absl::StatusOr<PeerId> peer = from.Connect(to.LocalAddress());
  if (!peer.ok()) return peer.status();
  std::vector<uint8_t> page(100, 5);
  std::vector<std::span<const uint8_t>> batch = {page};
  absl::StatusOr<TransferId> id = from.Submit(*peer, batch);
  if (!id.ok()) return id.status();
  return from.Wait(*id, absl::Now() + absl::Seconds(1));
}

struct Pair {
  std::unique_ptr<Transport> outsider;  // not restricted, not a member
  std::unique_ptr<Transport> member;    // not restricted, a member
  std::unique_ptr<Transport> guarded;   // restricted to the members
  std::shared_ptr<testing::FixedPeers> members = std::make_shared<testing::FixedPeers>();
};

Pair MakePair() {
  auto fabric = NewLoopbackFabric();
  Pair p;
  p.outsider = *CreateLoopbackTransport(fabric);
  p.member = *CreateLoopbackTransport(fabric);
  p.guarded = RestrictToPeers(*CreateLoopbackTransport(fabric), p.members);
  p.members->Add(p.member->LocalAddress());
  return p;
}

TEST(PeerAllowlist, ReceivesOnlyFromMembersAndNamesTheOutsider) {
  Pair p = MakePair();
  ASSERT_TRUE(Ship(*p.outsider, *p.guarded).ok());
  absl::StatusOr<ReceivedBatch> refused = p.guarded->Receive(absl::Now() + absl::Seconds(1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find(p.outsider->LocalAddress()), std::string::npos)
      << refused.status();

  ASSERT_TRUE(Ship(*p.member, *p.guarded).ok());
  absl::StatusOr<ReceivedBatch> got = p.guarded->Receive(absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->sender_address(), p.member->LocalAddress());
  EXPECT_EQ(got->total_bytes(), 100u);
  EXPECT_EQ(p.guarded->GetMetrics().peers_refused, 1u);
  // The outsider's batch was screened out by the inner engine, not taken and then dropped.
  EXPECT_EQ(p.guarded->GetMetrics().batches_received, 1u);
}

TEST(PeerAllowlist, ConnectsOnlyToMembers) {
  Pair p = MakePair();
  absl::StatusOr<PeerId> refused = p.guarded->Connect(p.outsider->LocalAddress());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("not a registered peer"), std::string::npos);
  EXPECT_TRUE(Ship(*p.guarded, *p.member).ok());
  EXPECT_EQ(p.guarded->GetMetrics().peers_refused, 1u);

  // A peer admitted later is accepted from then on.
  p.members->Add(p.outsider->LocalAddress());
  EXPECT_TRUE(Ship(*p.guarded, *p.outsider).ok());
}

TEST(PeerAllowlist, DescribesAddressesReadably) {
  const uint8_t ucp[] = {1, 2, 3};
  EXPECT_EQ(DescribeAddress(ucx_wire::WrapAddress(0x1a2b3c, 0, ucp)), "UCX engine 01a2b3c");
  EXPECT_EQ(DescribeAddress("loopback:3"), "loopback:3");
  EXPECT_EQ(DescribeAddress(std::string("\x01\x02\x00", 3)), "a 3-byte address");
}

}  // namespace
}  // namespace glimpse::transport
