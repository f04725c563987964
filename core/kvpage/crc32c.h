// CRC32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78), the checksum every encoded
// page carries. Crc32c("123456789") == 0xE3069283 (the standard check value).
//
// Values are the usual finalised CRCs (initial ~0, final XOR ~0), so Crc32cExtend(Crc32c(a), b)
// == Crc32c(a ++ b), as in LevelDB's crc32c::Extend. Where the compiler targets SSE4.2 the
// hardware instruction runs three interleaved streams (its latency is three cycles, its
// throughput one per cycle); where it also targets AVX2 + VPCLMULQDQ, inputs of 256 bytes and
// more are folded with carry-less multiplies instead (about 1.3x faster); elsewhere a byte-wise
// table gives the same values. Thread-safe, no allocation after the first call (which builds a
// constant table).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace glimpse::kvpage {

// CRC32C of `data` continuing from the finalised CRC `crc` (0 for a fresh start).
uint32_t Crc32cExtend(uint32_t crc, const uint8_t* data, size_t n);

inline uint32_t Crc32c(std::span<const uint8_t> data) {
  return Crc32cExtend(0, data.data(), data.size());
}

// Crc32c(a ++ b) from crc_a = Crc32c(a), crc_b = Crc32c(b) and len_b = b.size(), without the
// bytes (zlib's crc32_combine): lets parts of a message be checksummed separately, in any order.
// O(log len_b) multiplications modulo P; no table lookups into the data.
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, size_t len_b);

namespace internal {
// Both implementations, for tests: the portable table and (where compiled) the SSE4.2 path.
uint32_t Crc32cExtendPortable(uint32_t crc, const uint8_t* data, size_t n);
bool Crc32cHasHardware();
uint32_t Crc32cExtendHardware(uint32_t crc, const uint8_t* data, size_t n);  // == Portable if none
}  // namespace internal

}  // namespace glimpse::kvpage
