// Wire format of the UCX transport: the peer address wrapper, the 64-bit tag layout and the
// batch header. Pure functions, no UCX calls, so they can be tested (and fuzzed) on their own.
//
// Address (what LocalAddress() returns; every field little-endian):
//   u32 magic 'GUA2' | u32 ucp_len | u32 crc32c(engine_id ++ shm_host ++ ucp bytes) |
//   u64 engine_id | u64 shm_host | ucp bytes
// shm_host: the engine's host key (LocalHostKey) if it takes shared-memory endpoints from engines
// on its host (UcxOptions::local_shared_memory), else 0. An older 'GUA1' address (no shm_host) is
// read as shm_host 0. The CRC lets Connect() reject garbage before UCX parses it (UCX trusts its
// address blobs).
//
// Tag: [63..60] kind (1 header, 2 data) | [59..32] sender engine id (28 bits) |
//      [31..12] batch sequence (20 bits, wraps) | [11..0] buffer index.
//
// Header (one eager message per batch, sent before the data on the same endpoint):
//   u32 magic 'GUB2' | u32 sender | u32 seq | u32 n | u32 crc32c of all payload bytes |
//   u32 flags (bit 0: no CRC, the crc field is 0; others zero) | u32 addr_len |
//   u64 total_bytes | u64 sizes[n] | sender address (addr_len bytes)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace glimpse::transport::ucx_wire {

inline constexpr uint64_t kKindShift = 60;
inline constexpr uint64_t kKindMask = uint64_t{0xF} << kKindShift;
inline constexpr uint64_t kKindHeader = uint64_t{1} << kKindShift;
inline constexpr uint64_t kKindData = uint64_t{2} << kKindShift;
inline constexpr uint64_t kFullMask = ~uint64_t{0};
inline constexpr uint32_t kEngineIdMask = (1u << 28) - 1;
inline constexpr uint32_t kSeqMask = (1u << 20) - 1;
inline constexpr size_t kMaxBufferBytes = size_t{1} << 32;
inline constexpr size_t kMaxAddressBytes = 4096;  // a wrapped UCX address (a few hundred bytes)
// The longest valid header: 4,096 buffer sizes and the longest address.
inline constexpr size_t kMaxHeaderBytes = 36 + 8 * 4096 + kMaxAddressBytes;

inline uint64_t MakeTag(uint64_t kind, uint32_t sender, uint32_t seq, uint32_t index) {
  return kind | (uint64_t{sender & kEngineIdMask} << 32) | (uint64_t{seq & kSeqMask} << 12) |
         (index & 0xFFFu);
}

std::string WrapAddress(uint32_t engine_id, uint64_t shm_host,
                        std::span<const uint8_t> ucp_address);

struct ParsedAddress {
  uint32_t engine_id = 0;
  uint64_t shm_host = 0;
  std::span<const uint8_t> ucp_address;  // points into the input
};
absl::StatusOr<ParsedAddress> UnwrapAddress(std::string_view address);

struct BatchHeader {
  uint32_t sender = 0;
  uint32_t seq = 0;
  bool has_crc = true;  // false: SubmitOptions::checksum was off
  uint32_t crc = 0;
  uint64_t total_bytes = 0;
  std::vector<uint64_t> sizes;
  std::string sender_address;  // wrapped, as from WrapAddress
};

std::vector<uint8_t> EncodeHeader(const BatchHeader& h);
absl::StatusOr<BatchHeader> DecodeHeader(std::span<const uint8_t> bytes);

}  // namespace glimpse::transport::ucx_wire
