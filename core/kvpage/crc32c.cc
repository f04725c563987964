// CRC32C: a byte-wise table (portable) and SSE4.2 _mm_crc32_u64 over three interleaved streams.
//
// Both work on the raw register (no pre/post inversion) internally. Three streams over the blocks
// p0|p1|p2 of kBlock bytes each are joined with the zero-extension operator Z (appending kBlock
// zero bytes, which is linear over GF(2)): raw(s, p0 p1 p2) = Z(Z(raw(s, p0)) ^ raw(0, p1)) ^
// raw(0, p2). Z is applied through four 256-entry tables, one per byte of the register.
#include "core/kvpage/crc32c.h"

#include <array>
#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#define GLIMPSE_KVPAGE_CRC_HW 1
#endif

namespace glimpse::kvpage {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> MakeByteTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kByteTable = MakeByteTable();

uint32_t RawPortable(uint32_t s, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) s = kByteTable[(s ^ p[i]) & 0xFF] ^ (s >> 8);
  return s;
}

#ifdef GLIMPSE_KVPAGE_CRC_HW
constexpr size_t kBlock = 1024;  // bytes per stream per round; a round covers 3·kBlock

uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

uint32_t RawHardware1(uint32_t s, const uint8_t* p, size_t n) {
  uint64_t s64 = s;
  for (; n >= 8; n -= 8, p += 8) s64 = _mm_crc32_u64(s64, Load64(p));
  s = static_cast<uint32_t>(s64);
  for (; n > 0; --n, ++p) s = _mm_crc32_u8(s, *p);
  return s;
}

// shift[k][b] = Z(b << 8k): the register after appending kBlock zero bytes.
struct ShiftTables {
  uint32_t shift[4][256];
  ShiftTables() {
    static const uint8_t kZeros[kBlock] = {};
    uint32_t basis[32];
    for (int bit = 0; bit < 32; ++bit) basis[bit] = RawHardware1(1u << bit, kZeros, kBlock);
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int j = 0; j < 8; ++j) {
          if (b & (1u << j)) v ^= basis[8 * k + j];
        }
        shift[k][b] = v;
      }
    }
  }
  uint32_t Apply(uint32_t s) const {
    return shift[0][s & 0xFF] ^ shift[1][(s >> 8) & 0xFF] ^ shift[2][(s >> 16) & 0xFF] ^
           shift[3][s >> 24];
  }
};

uint32_t RawHardware(uint32_t s, const uint8_t* p, size_t n) {
  if (n >= 3 * kBlock) {
    static const ShiftTables tables;
    for (; n >= 3 * kBlock; n -= 3 * kBlock, p += 3 * kBlock) {
      uint64_t a = s, b = 0, c = 0;
      for (size_t i = 0; i < kBlock; i += 8) {
        a = _mm_crc32_u64(a, Load64(p + i));
        b = _mm_crc32_u64(b, Load64(p + kBlock + i));
        c = _mm_crc32_u64(c, Load64(p + 2 * kBlock + i));
      }
      s = tables.Apply(tables.Apply(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^
          static_cast<uint32_t>(c);
    }
  }
  return RawHardware1(s, p, n);
}
#endif

}  // namespace

namespace internal {

uint32_t Crc32cExtendPortable(uint32_t crc, const uint8_t* data, size_t n) {
  return ~RawPortable(~crc, data, n);
}

bool Crc32cHasHardware() {
#ifdef GLIMPSE_KVPAGE_CRC_HW
  return true;
#else
  return false;
#endif
}

uint32_t Crc32cExtendHardware(uint32_t crc, const uint8_t* data, size_t n) {
#ifdef GLIMPSE_KVPAGE_CRC_HW
  return ~RawHardware(~crc, data, n);
#else
  return Crc32cExtendPortable(crc, data, n);
#endif
}

}  // namespace internal

uint32_t Crc32cExtend(uint32_t crc, const uint8_t* data, size_t n) {
#ifdef GLIMPSE_KVPAGE_CRC_HW
  return ~RawHardware(~crc, data, n);
#else
  return ~RawPortable(~crc, data, n);
#endif
}

}  // namespace glimpse::kvpage
