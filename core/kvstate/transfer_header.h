// The first buffer of every page batch between a cache client and a cache node: which put ticket
// or get request the pages belong to. The pages follow in manifest order, either as buffers
// 1..page_count, or (flag kPacked) concatenated, split by the manifest's page sizes: in buffer 1
// alone, or, for a reply to a batched get (GetMany), in buffers 1..k that each hold whole pages
// back to back (typically one buffer per state, so a warm state ships from its packed memory
// without a copy). Packed is what both sides send: one large buffer costs the UCX transport one
// rendezvous instead of one per page, which on a loaded 2-core host is most of a 64 KiB page's
// transfer time.
//
// Layout, 24 bytes little-endian: u32 magic "GKVT", u16 version 1, u16 kind, u64 id,
// u32 page_count, u32 flags (bit 0: packed; others zero). DecodeBatchHeader rejects anything else
// (InvalidArgument, naming the field).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace glimpse::kvstate {

// kPrefillDelivery: a prefill worker's state for a decode worker (core/worker/prefill_delivery.h).
enum class BatchKind : uint16_t { kPut = 1, kGetReply = 2, kPrefillDelivery = 3 };

struct BatchHeader {
  static constexpr uint32_t kPacked = 1;
  BatchKind kind = BatchKind::kPut;
  uint64_t id = 0;  // put ticket or get request id
  uint32_t page_count = 0;
  uint32_t flags = 0;
};

inline constexpr size_t kBatchHeaderBytes = 24;

std::array<uint8_t, kBatchHeaderBytes> EncodeBatchHeader(const BatchHeader& h);
absl::StatusOr<BatchHeader> DecodeBatchHeader(std::span<const uint8_t> in);

// The pages of a batch, `bufs` being the buffers after the header: page i must be
// `sizes[i]` bytes; packed buffers must each end on a page boundary and hold at least one page.
// InvalidArgument naming the counts or sizes when the batch does not match.
absl::StatusOr<std::vector<std::span<const uint8_t>>> UnpackPages(
    const BatchHeader& h, std::span<const std::span<const uint8_t>> bufs,
    std::span<const uint32_t> sizes);

}  // namespace glimpse::kvstate
