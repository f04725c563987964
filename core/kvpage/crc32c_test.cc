#include "core/kvpage/crc32c.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace glimpse::kvpage {
namespace {

uint32_t CrcOf(const std::string& s) {
  return Crc32c({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
}

// Check values from RFC 3720 (iSCSI) B.4 and the CRC catalogue.
TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(CrcOf(""), 0x00000000u);
  EXPECT_EQ(CrcOf("a"), 0xC1D04330u);
  EXPECT_EQ(CrcOf("123456789"), 0xE3069283u);
  EXPECT_EQ(CrcOf(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(CrcOf(std::string(32, '\xff')), 0x62A8AB43u);
  std::string inc(32, 0), dec(32, 0);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<char>(i), dec[i] = static_cast<char>(31 - i);
  EXPECT_EQ(CrcOf(inc), 0x46DD794Eu);
  EXPECT_EQ(CrcOf(dec), 0x113FDB5Cu);
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  const std::string a = "hello, ", b = "world";
  const uint32_t first = CrcOf(a);
  EXPECT_EQ(Crc32cExtend(first, reinterpret_cast<const uint8_t*>(b.data()), b.size()),
            CrcOf(a + b));
}

TEST(Crc32cTest, CombineEqualsWhole) {
  std::mt19937 rng(11);
  std::vector<uint8_t> buf(70000);
  for (uint8_t& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t len_a : {0, 1, 5, 300, 4096}) {
    for (size_t len_b : {0, 1, 3, 8, 255, 1000, 65536}) {
      const uint8_t* a = buf.data();
      const uint8_t* b = buf.data() + len_a;
      EXPECT_EQ(Crc32cCombine(Crc32cExtend(0, a, len_a), Crc32cExtend(0, b, len_b), len_b),
                Crc32cExtend(0, a, len_a + len_b))
          << "len_a=" << len_a << " len_b=" << len_b;
    }
  }
}

// The hardware paths (carry-less folding from 256 bytes where compiled, else three interleaved
// streams past 3 KiB) agree with the table at every length and alignment, including lengths
// around the fold step (128 bytes) and stream block boundaries.
TEST(Crc32cTest, HardwareMatchesPortable) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(20000);
  for (uint8_t& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t n : {0,   1,   7,   8,    9,    63,   127,  128,  255,  256,  257,
                   383, 384, 385, 1023, 3071, 3072, 3073, 6144, 6151, 9000, 19990}) {
    for (size_t off : {0, 1, 3, 7}) {
      const uint8_t* p = buf.data() + off;
      const uint32_t seed = static_cast<uint32_t>(n * 31 + off);
      EXPECT_EQ(internal::Crc32cExtendHardware(seed, p, n),
                internal::Crc32cExtendPortable(seed, p, n))
          << "n=" << n << " off=" << off;
      EXPECT_EQ(Crc32cExtend(0, p, n), internal::Crc32cExtendPortable(0, p, n));
    }
  }
  if (!internal::Crc32cHasHardware()) GTEST_SKIP() << "built without SSE4.2; table path only";
}

}  // namespace
}  // namespace glimpse::kvpage
