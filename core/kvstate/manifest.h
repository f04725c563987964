// A state manifest: what a cache node stores beside a state's pages, and what a client sends to
// put a state or gets back with one. One entry per page, sorted by (layer, kv_head, index); each
// names the page's original positions range, its importance, its tier and its size and CRC32C, so a
// reader can choose pages without fetching any.
//
// Contract:
//   - ValidateManifest checks the structure alone (no page bytes): a positive token count, pages
//     sorted and unique, positions 0 ≤ first ≤ last < token_count, 1 ≤ n_tokens ≤ last − first + 1,
//     importance finite in [0, 1], a known tier, bytes > the page header, and the limits.
//     InvalidArgument naming the page and the bad value otherwise.
//   - CheckPage verifies one page's bytes against its entry: header (ParsePageHeader), exact size,
//     CRC32C, layer, kv_head, n_tokens, CRC, model (FailedPrecondition naming both fingerprints)
//     and state key. With `full_decode` it also decodes the page (DecodePage: positions strictly
//     increasing, summary min ≤ max) and checks the positions range; without, the CRC alone proves
//     the bytes are the ones that were verified on the way in.
//   - EncodeManifest / DecodeManifest: a versioned little-endian binary form (the storage format);
//     DecodeManifest validates everything it reads (DataLoss on a truncated or corrupt record).
// Thread-compatible value types.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kvstate/state_key.h"

namespace glimpse::kvstate {

// Whether a page was kept in the hot (decode-side) cache or evicted by the eviction policy.
enum class Tier : uint8_t { kRetained = 1, kEvicted = 2 };

struct PageRef {
  uint32_t layer = 0;
  uint32_t kv_head = 0;
  uint32_t index = 0;          // page number within (layer, kv_head)
  int32_t first_position = 0;  // original position of the page's first token
  int32_t last_position = 0;   // ... and of its last
  uint32_t n_tokens = 0;
  float importance = 0.0f;  // keep score in [0, 1] (e.g. mean normalised token score)
  Tier tier = Tier::kRetained;
  uint32_t bytes = 0;   // encoded page size (kvpage)
  uint32_t crc32c = 0;  // the page header's CRC32C

  bool operator==(const PageRef&) const = default;
};

// Names one page of a state.
struct PageId {
  uint32_t layer = 0;
  uint32_t kv_head = 0;
  uint32_t index = 0;
};

struct Manifest {
  StateKey state_key{};
  NamespaceKey namespace_key{};
  Fingerprint model{};
  std::string architecture;         // model family, informational ("llama")
  uint32_t token_count = 0;         // tokens of the prefix this state summarises
  int64_t created_unix_micros = 0;  // set by the cache node when stored
  std::vector<PageRef> pages;       // sorted by (layer, kv_head, index)

  uint64_t total_page_bytes() const;
  // Equal in everything but the creation time.
  bool SameContent(const Manifest& other) const;
};

struct ManifestLimits {
  size_t max_pages = 1 << 20;
  uint64_t max_state_bytes = uint64_t{4} << 30;
  uint32_t max_page_bytes = 64u << 20;
};

absl::Status ValidateManifest(const Manifest& m, const ManifestLimits& limits = {});

absl::Status CheckPage(const Manifest& m, const PageRef& ref, std::span<const uint8_t> bytes,
                       bool full_decode);
// CheckPage with full_decode, returning the decoded page (one decode, one CRC pass).
absl::StatusOr<kvpage::Page> DecodeCheckedPage(const Manifest& m, const PageRef& ref,
                                               std::span<const uint8_t> bytes);

std::string EncodeManifest(const Manifest& m);
absl::StatusOr<Manifest> DecodeManifest(std::string_view bytes);

// "(layer L, kv_head H, index I)" for messages.
std::string PageName(const PageRef& ref);

}  // namespace glimpse::kvstate
