#include "core/transport/ucx/ucx_wire.h"

#include <cstring>

#include "core/kvpage/crc32c.h"
#include "gtest/gtest.h"

namespace glimpse::transport::ucx_wire {
namespace {

TEST(UcxWire, AddressRoundTripAndGarbage) {
  std::vector<uint8_t> ucp = {1, 2, 3, 4, 5};
  std::string a = WrapAddress(0x123456, 0x0123456789abcdef, ucp);
  auto p = UnwrapAddress(a);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->engine_id, 0x123456u);
  EXPECT_EQ(p->shm_host, 0x0123456789abcdefu);
  EXPECT_EQ(std::vector<uint8_t>(p->ucp_address.begin(), p->ucp_address.end()), ucp);
  EXPECT_EQ(UnwrapAddress("garbage").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UnwrapAddress("").status().code(), absl::StatusCode::kInvalidArgument);
  for (size_t i = 0; i < a.size(); ++i) {  // every single-byte corruption is caught
    std::string b = a;
    b[i] ^= 0x40;
    EXPECT_FALSE(UnwrapAddress(b).ok()) << "byte " << i;
  }
  EXPECT_FALSE(UnwrapAddress(a.substr(0, a.size() - 1)).ok());
}

TEST(UcxWire, AddressOfAnOlderEngineHasNoSharedMemoryHost) {
  // 'GUA1': magic, ucp_len, crc32c(engine_id ++ ucp), u64 engine_id, ucp bytes.
  const std::vector<uint8_t> ucp = {9, 8, 7};
  std::string v2 = WrapAddress(0x42, 0x77, ucp);
  std::string v1 = v2.substr(0, 20) + v2.substr(28);
  v1[0] = 'G', v1[1] = 'U', v1[2] = 'A', v1[3] = '1';
  const uint64_t id = 0x42;
  uint32_t crc = kvpage::Crc32cExtend(0, reinterpret_cast<const uint8_t*>(&id), sizeof(id));
  crc = kvpage::Crc32cExtend(crc, ucp.data(), ucp.size());
  std::memcpy(v1.data() + 8, &crc, sizeof(crc));
  auto p = UnwrapAddress(v1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->engine_id, 0x42u);
  EXPECT_EQ(p->shm_host, 0u);
  EXPECT_EQ(std::vector<uint8_t>(p->ucp_address.begin(), p->ucp_address.end()), ucp);
}

TEST(UcxWire, HeaderRoundTripAndRejects) {
  BatchHeader h{7, 42, true, 0xdeadbeef, 1 + 4096 + 3, {1, 4096, 3}, "addr"};
  std::vector<uint8_t> b = EncodeHeader(h);
  auto d = DecodeHeader(b);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->sender, 7u);
  EXPECT_EQ(d->seq, 42u);
  EXPECT_TRUE(d->has_crc);
  EXPECT_EQ(d->crc, 0xdeadbeefu);
  EXPECT_EQ(d->sizes, h.sizes);
  EXPECT_EQ(d->sender_address, "addr");
  std::vector<uint8_t> short_b(b.begin(), b.end() - 1);
  EXPECT_EQ(DecodeHeader(short_b).status().code(), absl::StatusCode::kDataLoss);
  std::vector<uint8_t> bad_total = b;
  bad_total[28] ^= 1;
  EXPECT_EQ(DecodeHeader(bad_total).status().code(), absl::StatusCode::kDataLoss);
  std::vector<uint8_t> unknown_flag = b;
  unknown_flag[20] |= 2;
  EXPECT_EQ(DecodeHeader(unknown_flag).status().code(), absl::StatusCode::kDataLoss);
  std::vector<uint8_t> older = b;  // "GUB1": a peer from before the flags field
  older[3] = '1';
  EXPECT_EQ(DecodeHeader(older).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(UcxWire, HeaderWithoutCrc) {
  BatchHeader h{7, 42, false, 0xdeadbeef, 10, {10}, "addr"};
  std::vector<uint8_t> b = EncodeHeader(h);
  auto d = DecodeHeader(b);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->has_crc);
  EXPECT_EQ(d->crc, 0u);  // not sent
  std::vector<uint8_t> crc_beside_no_crc_flag = b;
  crc_beside_no_crc_flag[16] = 1;  // a CRC beside the no-CRC flag is a corrupt header
  EXPECT_EQ(DecodeHeader(crc_beside_no_crc_flag).status().code(), absl::StatusCode::kDataLoss);
}

TEST(UcxWire, TagLayoutSeparatesKindsSendersSeqsIndices) {
  uint64_t t = MakeTag(kKindData, kEngineIdMask, kSeqMask, 4095);
  EXPECT_EQ(t & kKindMask, kKindData);
  EXPECT_NE(MakeTag(kKindData, 1, 2, 3), MakeTag(kKindData, 1, 2, 4));
  EXPECT_NE(MakeTag(kKindData, 1, 2, 3), MakeTag(kKindData, 2, 2, 3));
  EXPECT_NE(MakeTag(kKindData, 1, 2, 3), MakeTag(kKindHeader, 1, 2, 3));
}

}  // namespace
}  // namespace glimpse::transport::ucx_wire
