// A prefill delivery shipped as a delta against the decode worker's hot copy of the session
// (DESIGN.md §1: the prefill worker ships only what the decode worker does not hold).
//
// When the session is hot on the decode worker and the prefill worker started from the very state
// that hot copy is (the decode worker stored it at the end of its last turn), the delivery carries:
//   - the retained pages of the entries the new state keeps and the base does not (the turn's new
//     tokens and recalled cold entries), in the usual manifest and pages buffers;
//   - a DeltaBase (buffer 3): the base's state key, and per (layer, kv-head) the base positions the
//     new state no longer keeps and the entry count and position CRC32C the head must end with.
// The decode worker applies it only to a hot copy whose state key is the base key (ApplyDelta):
// drop, merge, and check every head against its count and CRC, all before touching the cache,
// so a delta that does not fit leaves the hot copy as it was and the turn starts without it.
//
// Wire form of a DeltaBase (little-endian): u32 magic 'GDB1' | u32 heads | 16-byte base key |
// per head: u32 final_count | u32 final_crc | u32 n_dropped | i32 dropped[n_dropped] |
// u32 crc32c of everything before it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kvstate/manifest.h"
#include "core/model/kv_cache.h"

namespace glimpse::worker {

struct DeltaBase {
  kvstate::StateKey base_key{};
  // Per layer · Hkv + kv_head.
  std::vector<std::vector<int32_t>> dropped;  // base positions no longer kept, increasing
  std::vector<uint32_t> final_counts;         // entries the head holds after the delta
  std::vector<uint32_t> final_crcs;           // CRC32C of those entries' positions (int32 LE)
};

std::vector<uint8_t> EncodeDeltaBase(const DeltaBase& base);
// DataLoss for a truncated or corrupt encoding.
absl::StatusOr<DeltaBase> DecodeDeltaBase(std::span<const uint8_t> bytes);

// What a prefill worker ships against a base: `added` holds, per head, the entries of `after`
// whose positions `base_positions` (per layer · Hkv + kv_head) lacks (an fp32 cache of its own).
struct Delta {
  model::KvCache added;
  DeltaBase base;
};
absl::StatusOr<Delta> MakeDelta(const std::vector<std::vector<int32_t>>& base_positions,
                                const kvstate::StateKey& base_key, const model::KvCache& after);

// The positions of every head of `cache`, per layer · Hkv + kv_head.
std::vector<std::vector<int32_t>> HeadPositions(const model::KvCache& cache);

// Applies `base` and the added entries (the retained pages `pages` listed by `manifest`, checked
// against it) to `hot`. InvalidArgument / DataLoss naming the head when a dropped position is
// missing, an added one is held already, or a head ends with another count or CRC; `hot` is
// unchanged then. ResourceExhausted when `hot`'s KV pool cannot hold the result: `hot` may then
// have lost entries, and the caller drops it.
absl::Status ApplyDelta(const DeltaBase& base, const kvstate::Manifest& manifest,
                        std::span<const std::span<const uint8_t>> pages, model::KvCache& hot);

}  // namespace glimpse::worker
