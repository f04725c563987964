#include "core/kvstate/transfer_header.h"

#include "gtest/gtest.h"

namespace glimpse::kvstate {
namespace {

TEST(TransferHeaderTest, RoundTripAndRejects) {
  BatchHeader h{BatchKind::kGetReply, 0x1234567890abcdefull, 77};
  auto bytes = EncodeBatchHeader(h);
  auto back = DecodeBatchHeader(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, BatchKind::kGetReply);
  EXPECT_EQ(back->id, h.id);
  EXPECT_EQ(back->page_count, 77u);
  EXPECT_FALSE(DecodeBatchHeader(std::span<const uint8_t>(bytes).first(23)).ok());
  for (size_t i : {0u, 4u, 6u, 21u}) {
    auto bad = bytes;
    bad[i] ^= 0x40;
    EXPECT_FALSE(DecodeBatchHeader(bad).ok()) << i;
  }
}

TEST(TransferHeaderTest, UnpackPackedAndSeparatePages) {
  const std::vector<uint8_t> all = {1, 2, 3, 4, 5, 6};
  const std::vector<uint32_t> sizes = {2, 3, 1};
  std::span<const uint8_t> packed(all);
  BatchHeader h{BatchKind::kPut, 1, 3, BatchHeader::kPacked};
  auto back = DecodeBatchHeader(EncodeBatchHeader(h));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->flags, BatchHeader::kPacked);
  auto pages = UnpackPages(*back, {&packed, 1}, sizes);
  ASSERT_TRUE(pages.ok()) << pages.status();
  ASSERT_EQ(pages->size(), 3u);
  EXPECT_EQ((*pages)[1][0], 3);
  EXPECT_EQ((*pages)[2].size(), 1u);
  std::span<const uint8_t> short_buf = packed.first(5);
  EXPECT_FALSE(UnpackPages(*back, {&short_buf, 1}, sizes).ok());
  const std::vector<uint32_t> two = {2, 3};
  EXPECT_FALSE(UnpackPages(*back, {&packed, 1}, two).ok());
  std::vector<std::span<const uint8_t>> separate = {packed.first(2), packed.subspan(2, 3),
                                                    packed.subspan(5)};
  h.flags = 0;
  pages = UnpackPages(h, separate, sizes);
  ASSERT_TRUE(pages.ok());
  EXPECT_EQ((*pages)[2][0], 6);
  EXPECT_FALSE(UnpackPages(h, std::span(separate).first(2), sizes).ok());
}

// A batched get's reply: packed buffers of whole pages each (one per state).
TEST(TransferHeaderTest, UnpackSeveralPackedBuffers) {
  const std::vector<uint8_t> all = {1, 2, 3, 4, 5, 6, 7};
  const std::span<const uint8_t> bytes(all);
  const std::vector<uint32_t> sizes = {2, 3, 1, 1};
  const BatchHeader h{BatchKind::kGetReply, 9, 4, BatchHeader::kPacked};
  const std::vector<std::span<const uint8_t>> bufs = {bytes.first(5), bytes.subspan(5, 1),
                                                      bytes.subspan(6)};
  auto pages = UnpackPages(h, bufs, sizes);
  ASSERT_TRUE(pages.ok()) << pages.status();
  ASSERT_EQ(pages->size(), 4u);
  EXPECT_EQ((*pages)[1].data(), all.data() + 2);
  EXPECT_EQ((*pages)[1].size(), 3u);
  EXPECT_EQ((*pages)[2][0], 6);
  EXPECT_EQ((*pages)[3][0], 7);
  // A buffer that ends inside a page, an empty buffer, too few bytes, no buffer at all.
  const std::vector<std::span<const uint8_t>> split = {bytes.first(4), bytes.subspan(4)};
  EXPECT_EQ(UnpackPages(h, split, sizes).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<std::span<const uint8_t>> empty = {bytes, bytes.first(0)};
  EXPECT_EQ(UnpackPages(h, empty, sizes).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<std::span<const uint8_t>> short_bufs = {bytes.first(5), bytes.subspan(5, 1)};
  EXPECT_EQ(UnpackPages(h, short_bufs, sizes).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UnpackPages(h, {}, sizes).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace glimpse::kvstate
