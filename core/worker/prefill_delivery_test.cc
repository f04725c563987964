#include "core/worker/prefill_delivery.h"

#include "core/kvstate/test_cache.h"
#include "core/transport/loopback/loopback_transport.h"
#include "gtest/gtest.h"

namespace glimpse::worker {
namespace {

using kvstate::testing::AppendTestEntry;
constexpr int32_t kLayers = kvstate::testing::kTestLayers, kHeads = kvstate::testing::kTestKvHeads,
                  kDim = kvstate::testing::kTestHeadDim;

// 40 tokens; each head keeps the positions with (p + l + h) % 3 != 0, the rest is evicted.
struct Prefilled {
  model::KvCache retained{kLayers, kHeads, kDim};
  std::vector<model::KvHead> evicted = std::vector<model::KvHead>(kLayers * kHeads);
  kvstate::EncodedState state;
};

Prefilled MakePrefilled() {
  Prefilled p;
  for (int32_t l = 0; l < kLayers; ++l) {
    for (int32_t h = 0; h < kHeads; ++h) {
      for (int32_t pos = 0; pos < 40; ++pos) {
        if ((pos + l + h) % 3 != 0) {
          AppendTestEntry(&p.retained, l, h, pos);
        } else {
          AppendTestEntry(&p.evicted[l * kHeads + h], pos);
        }
      }
    }
  }
  p.state = *kvstate::EncodeState({.retained = &p.retained, .evicted = p.evicted},
                                  kvstate::testing::TestIdentity(40), {.page_tokens = 8});
  return p;
}

class DeliveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fabric_ = transport::NewLoopbackFabric();
    sender_ = *transport::CreateLoopbackTransport(fabric_);
  }
  void MakeInbox(DeliveryInboxOptions o = {}) {
    inbox_ = std::make_unique<DeliveryInbox>(*transport::CreateLoopbackTransport(fabric_), o);
    peer_ = *sender_->Connect(inbox_->address());
  }
  absl::Status Ship(const std::vector<std::span<const uint8_t>>& buffers) {
    absl::StatusOr<transport::TransferId> t = sender_->Submit(peer_, buffers);
    if (!t.ok()) return t.status();
    return sender_->Wait(*t, absl::Now() + absl::Seconds(5));
  }

  std::shared_ptr<transport::LoopbackFabric> fabric_;
  std::unique_ptr<transport::Transport> sender_;
  std::unique_ptr<DeliveryInbox> inbox_;
  transport::PeerId peer_ = 0;
};

TEST_F(DeliveryTest, ShipsTheRetainedPagesAloneAndTheyLoadIntoTheSameCache) {
  MakeInbox();
  Prefilled p = MakePrefilled();
  OutgoingDelivery out = MakeDelivery(77, p.state);
  ASSERT_TRUE(Ship(out.buffers()).ok());
  absl::StatusOr<Delivery> d = inbox_->Take(77, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->bytes, out.bytes());
  EXPECT_EQ(d->manifest.state_key, p.state.manifest.state_key);
  EXPECT_EQ(d->manifest.token_count, 40u);
  for (const kvstate::PageRef& ref : d->manifest.pages)
    EXPECT_EQ(ref.tier, kvstate::Tier::kRetained);
  EXPECT_LT(d->manifest.pages.size(), p.state.manifest.pages.size());
  model::KvCache loaded(kLayers, kHeads, kDim);
  ASSERT_TRUE(kvstate::LoadPages(d->manifest, d->pages, kvstate::LoadTiers::kAll, &loaded).ok());
  kvstate::testing::ExpectSameCache(loaded, p.retained);
  EXPECT_EQ(inbox_->Stats().received, 1u);
  EXPECT_EQ(inbox_->Stats().held, 0u);
}

TEST_F(DeliveryTest, AnIdThatNeverArrivesIsDeadlineExceededNamingIt) {
  MakeInbox();
  absl::StatusOr<Delivery> d = inbox_->Take(5, absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(d.status().message(), "prefill delivery 5 did not arrive in time");
}

TEST_F(DeliveryTest, MalformedBatchesAreDroppedAndCounted) {
  MakeInbox();
  Prefilled p = MakePrefilled();
  OutgoingDelivery out = MakeDelivery(9, p.state);
  std::vector<std::span<const uint8_t>> bufs = out.buffers();
  ASSERT_TRUE(Ship({bufs[0], bufs[1]}).ok());  // no pages buffer
  std::string garbage = "not a manifest";
  ASSERT_TRUE(
      Ship({bufs[0], {reinterpret_cast<const uint8_t*>(garbage.data()), garbage.size()}, bufs[2]})
          .ok());
  std::vector<uint8_t> short_pages(out.pages.begin(), out.pages.end() - 1);
  ASSERT_TRUE(Ship({bufs[0], bufs[1], short_pages}).ok());
  auto put = kvstate::EncodeBatchHeader({kvstate::BatchKind::kPut, 9, 1, 0});
  ASSERT_TRUE(Ship({put, bufs[1], bufs[2]}).ok());
  EXPECT_EQ(inbox_->Take(9, absl::Now() + absl::Milliseconds(200)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(inbox_->Stats().rejected, 4u);
  EXPECT_EQ(inbox_->Stats().received, 0u);
}

TEST_F(DeliveryTest, DeliveriesNoTurnTookAreDroppedOldestFirst) {
  MakeInbox({.keep_for = absl::Seconds(60), .max_bytes = 1});  // room for one
  Prefilled p = MakePrefilled();
  OutgoingDelivery first = MakeDelivery(1, p.state), second = MakeDelivery(2, p.state);
  ASSERT_TRUE(Ship(first.buffers()).ok());
  ASSERT_TRUE(Ship(second.buffers()).ok());
  ASSERT_TRUE(inbox_->Take(2, absl::Now() + absl::Seconds(5)).ok());
  EXPECT_FALSE(inbox_->Take(1, absl::Now()).ok());
  EXPECT_EQ(inbox_->Stats().dropped, 1u);
  EXPECT_EQ(inbox_->Stats().held_bytes, 0u);
}

}  // namespace
}  // namespace glimpse::worker
