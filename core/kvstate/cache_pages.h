// A session's KV as a stored state: the ragged KV cache a Session holds (core/model/kv_cache.h)
// turned into a manifest and encoded pages (EncodeState), and stored pages turned back into a
// cache (LoadPages). This is what a prefill worker ships to a decode worker and what either writes
// to a cache node (DESIGN.md §1, §3).
//
// Layout of an encoded state: for each (layer, kv-head) in order, its retained entries in pages of
// up to `page_tokens` tokens (index 0, 1, …), then its evicted entries the same way (the indices
// continue). Entries stay in position order inside each tier, so a page's positions increase.
// Importance of a page = the mean of its entries' scores after min–max normalisation over all
// entries (both tiers) of that (layer, kv-head); without scores, retained pages get 1 and evicted
// pages 0. KIVI codecs keep the last kKiviResidual retained entries of each head in fp16
// (kvpage::KiviResidualRows); evicted pages have no residual rows. A cache encoded in its own
// format's codec (model::RowCodec) and page size stores its retained pages as the pool holds
// them, byte for byte, without decoding or encoding (a KIVI head's fp16 rows after its sealed
// pages as residual rows), so the state holds exactly what the cache held.
//
// LoadPages decodes pages (each checked against its manifest entry and the manifest's model: CRC,
// header, shape, positions; kvstate::CheckPage) and merges their entries into a cache by position,
// so retained and evicted pages of a head (or recalled cold pages and a hot cache) interleave
// correctly. Into an empty head, pages that do not interleave are appended one by one, a page in
// the cache's own format straight into pool pages (model::KvCache::TakesSections: no decode, no
// re-encode): what a cache stored as it was held loads back bit for bit. Errors: InvalidArgument
// when shapes disagree (naming layer, head and the values) or a position would appear twice in a
// head; FailedPrecondition for another model; DataLoss for corrupt bytes. Nothing changes when a
// page fails to decode or merge (every page is decoded first); a head that then fails to load (a
// full pool) is left as it was, heads loaded before it keep their entries, and callers drop the
// session. Thread-compatible.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kvpage/codec.h"
#include "core/kvstate/manifest.h"
#include "core/model/kv_cache.h"

namespace glimpse::kvstate {

struct StateIdentity {
  StateKey state_key{};
  NamespaceKey namespace_key{};
  Fingerprint model{};
  std::string architecture;  // informational ("llama")
  uint32_t token_count = 0;  // tokens of the prefix the state summarises
};

struct EncodeStateOptions {
  kvpage::Codec codec = kvpage::Codec::kFp16;
  int64_t page_tokens = kvpage::kDefaultPageTokens;
};

// What to encode. Every span is either empty or has one element per (layer, kv-head), indexed
// layer · n_kv_heads + kv_head; score vectors have one score per entry of the matching head.
struct StateContent {
  const model::KvCache* retained = nullptr;                  // required
  std::span<const model::KvHead> evicted = {};               // optional: entries evicted this turn
  std::span<const std::vector<float>> retained_scores = {};  // optional
  std::span<const std::vector<float>> evicted_scores = {};   // optional (needs retained_scores)
};

struct EncodedState {
  Manifest manifest;
  std::vector<uint8_t> bytes;  // the pages, concatenated in manifest order
  // pages[i] is manifest.pages[i], a view into `bytes`.
  std::vector<std::span<const uint8_t>> pages() const;
};

absl::StatusOr<EncodedState> EncodeState(const StateContent& content, const StateIdentity& id,
                                         const EncodeStateOptions& options = {});

// Which pages LoadPages appends.
enum class LoadTiers { kRetained, kEvicted, kAll };

// Merges the entries of the manifest's pages of the chosen tiers into `cache`. `pages[i]` holds
// manifest.pages[i] (the manifest may list a subset of a stored state's pages).
absl::Status LoadPages(const Manifest& manifest, std::span<const std::span<const uint8_t>> pages,
                       LoadTiers tiers, model::KvCache* cache);

}  // namespace glimpse::kvstate
