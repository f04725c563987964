#include "core/transport/loopback/loopback_transport.h"

#include "gtest/gtest.h"

namespace glimpse::transport {
namespace {

TEST(LoopbackTransport, ShipsBatchesAndVerifiesChecksum) {
  auto fabric = NewLoopbackFabric();
  auto a = CreateLoopbackTransport(fabric);
  auto b = CreateLoopbackTransport(fabric);
  ASSERT_TRUE(a.ok() && b.ok());
  auto peer = (*a)->Connect((*b)->LocalAddress());
  ASSERT_TRUE(peer.ok()) << peer.status();
  std::vector<uint8_t> x(1000, 7), y(3, 9);
  std::vector<std::span<const uint8_t>> batch = {x, y};
  auto id = (*a)->Submit(*peer, batch);
  ASSERT_TRUE(id.ok());
  EXPECT_TRUE((*a)->Wait(*id, absl::Now() + absl::Seconds(1)).ok());
  auto got = (*b)->Receive(absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->buffers().size(), 2u);
  EXPECT_EQ(got->total_bytes(), 1003u);
  EXPECT_EQ(got->buffers()[1][2], 9);
  EXPECT_TRUE(got->checksummed());

  SubmitOptions unchecked;  // the payload's own checksums are the receiver's business
  unchecked.checksum = false;
  TEST_CorruptLoopbackChecksums(**a, true);
  ASSERT_TRUE((*a)->Submit(*peer, batch, unchecked).ok());
  got = (*b)->Receive(absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->checksummed());
  EXPECT_EQ(got->total_bytes(), 1003u);

  ASSERT_TRUE((*a)->Submit(*peer, batch, SubmitOptions{}).ok());
  EXPECT_EQ((*b)->Receive(absl::Now() + absl::Seconds(1)).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ((*b)->Receive(absl::Now() + absl::Milliseconds(10)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ((*a)->Connect("nonsense").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*b)->GetMetrics().checksum_errors, 1u);
}

}  // namespace
}  // namespace glimpse::transport
