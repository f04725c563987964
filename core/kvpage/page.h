// A KV page: up to P tokens (default 64) of one (layer, kv-head) — keys, values, the original
// positions of those tokens and a per-channel min/max summary of the keys — encoded into one
// self-describing, checksummed byte string.
//
// EncodePage writes straight into a caller-provided buffer (for instance registered transfer
// memory) of at least EncodedSize() bytes and returns the bytes written; it never allocates.
// DecodePage validates everything before it trusts anything: magic, format version, codec id,
// flags, shape limits, payload length against the input size, CRC32C, the model fingerprint (if
// the caller expects one), positions (≥ 0, strictly increasing) and the summary (min ≤ max). Any
// input yields a page or an error, and no byte outside the input is read. Errors:
//   InvalidArgument     bad arguments to Encode*, or a malformed header (magic, codec, flags,
//                       shape, reserved bytes), or insane positions / summary
//   FailedPrecondition  a format version this build does not read; a model fingerprint other
//                       than the expected one (the message names both, in hex)
//   DataLoss            truncated or over-long input, or a CRC32C mismatch
//   ResourceExhausted   EncodePage's output buffer is too small (names both sizes)
// Every message names the offending value. All functions are thread-compatible.
//
// Byte layout, little-endian, format version 1 (header 64 bytes, then the payload):
//   off size field
//     0    4 magic            "GKVP" (47 4B 56 50)
//     4    2 format_version   1
//     6    1 codec            Codec id (codec.h)
//     7    1 flags            bit 0: summary is fp32 (else fp16); bits 1..7 zero
//     8    2 n_tokens         1 .. kMaxPageTokens
//    10    2 head_dim         1 .. kMaxHeadDim
//    12    2 residual_rows    the last residual_rows rows of keys and values are stored fp16
//                             (0 .. n_tokens; non-zero only for codecs with supports_residual)
//    14    2 reserved         zero
//    16    4 layer            u32
//    20    4 kv_head          u32
//    24   16 model            model fingerprint (DESIGN.md §3)
//    40   16 state_key        state key of the session prefix this page belongs to
//    56    4 payload_length   bytes after the header; must equal the size the fields imply
//    60    4 crc32c           CRC32C of bytes [0, 60) followed by the payload
//    64      payload:
//            key_min[head_dim], key_max[head_dim]   fp16 or fp32 (flags bit 0); fp16 bounds are
//                                                   rounded outwards, so min ≤ key ≤ max holds
//                                                   for every stored key (±inf beyond ±65504)
//            positions[n_tokens]                    int32
//            keys section                           codec.h, Role::kKeys
//            values section                         codec.h, Role::kValues
// The summary comes first so that a reader holding only the first 64 + 4·head_dim bytes can
// score the page (it is verified only once the whole page is read).
//
// KIVI residual at page granularity: KIVI keeps the last R = 32 tokens of a sequence in fp16.
// A page records how many of its own trailing rows are such tokens (residual_rows); those rows
// are stored fp16 in both sections and the rest is quantised, keys in token groups of 32 counted
// from the page's first row. KiviResidualRows() computes the count for a page at a given place in
// a sequence; pages wholly before the last R tokens have none.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kvpage/codec.h"

namespace glimpse::kvpage {

inline constexpr uint32_t kPageMagic = 0x50564B47;  // "GKVP" read as little-endian u32
inline constexpr uint16_t kPageFormatVersion = 1;
inline constexpr size_t kPageHeaderBytes = 64;
inline constexpr int64_t kDefaultPageTokens = 64;
inline constexpr int64_t kMaxPageTokens = 4096;

using Fingerprint = std::array<uint8_t, 16>;  // model fingerprint
using StateKey = std::array<uint8_t, 16>;
std::string ToHex(const std::array<uint8_t, 16>& bytes);  // 32 lowercase hex digits

enum class SummaryType : uint8_t { kFp16 = 0, kFp32 = 1 };

// The tokens to encode; borrowed, not owned, and only read during EncodePage.
struct PageView {
  uint32_t layer = 0;
  uint32_t kv_head = 0;
  int64_t n_tokens = 0;                // 1 .. kMaxPageTokens
  int64_t head_dim = 0;                // 1 .. kMaxHeadDim
  const float* keys = nullptr;         // [n_tokens, head_dim]
  const float* values = nullptr;       // [n_tokens, head_dim]
  const int32_t* positions = nullptr;  // [n_tokens], ≥ 0, strictly increasing
  Fingerprint model{};
  StateKey state_key{};
};

struct EncodeOptions {
  SummaryType summary = SummaryType::kFp16;
  int64_t residual_rows = 0;  // trailing rows kept fp16 (KIVI codecs only); see above
  // When both are set: the keys and values sections, already in the codec with these residual
  // rows (a KV pool page as it is, model/kv_pool.h), stored byte for byte instead of encoding the
  // view's keys and values, which then only give the summary (pass the sections' decoding).
  // InvalidArgument when a size is not the codec's.
  std::span<const uint8_t> keys_section;
  std::span<const uint8_t> values_section;
};

// The decoded header fields.
struct PageHeader {
  uint16_t format_version = 0;
  Codec codec = Codec::kFp16;
  SummaryType summary = SummaryType::kFp16;
  int64_t n_tokens = 0;
  int64_t head_dim = 0;
  int64_t residual_rows = 0;
  uint32_t layer = 0;
  uint32_t kv_head = 0;
  Fingerprint model{};
  StateKey state_key{};
  uint32_t payload_bytes = 0;
  uint32_t crc32c = 0;

  size_t total_bytes() const { return kPageHeaderBytes + payload_bytes; }
};

// A decoded page; owns its arrays.
struct Page {
  PageHeader header;
  std::vector<float> key_min;      // [head_dim]
  std::vector<float> key_max;      // [head_dim]
  std::vector<int32_t> positions;  // [n_tokens]
  std::vector<float> keys;         // [n_tokens, head_dim]
  std::vector<float> values;       // [n_tokens, head_dim]
};

// Exact size EncodePage will write, after validating the view's shape and the options.
absl::StatusOr<size_t> EncodedSize(const PageView& page, Codec codec,
                                   const EncodeOptions& options = {});

// Encodes `page` into out[0, EncodedSize) and returns the bytes written. On error `out` holds
// garbage and nothing should be sent. Also rejects values the codec cannot store (codec.h).
absl::StatusOr<size_t> EncodePage(const PageView& page, Codec codec, std::span<uint8_t> out,
                                  const EncodeOptions& options = {});

struct DecodeOptions {
  std::optional<Fingerprint> expected_model;  // checked when set
};

// Validates the header alone (not the CRC, which needs the payload); `in` must hold at least the
// 64 header bytes. Lets a reader learn a page's total size and shape from its first bytes.
absl::StatusOr<PageHeader> ParsePageHeader(std::span<const uint8_t> in);

// Decodes a whole page (`in` must be exactly header + payload). The second form reuses `page`'s
// vectors, so a caller decoding many pages allocates only when shapes grow; on error `*page` is
// unspecified.
absl::StatusOr<Page> DecodePage(std::span<const uint8_t> in, const DecodeOptions& options = {});
absl::Status DecodePageInto(std::span<const uint8_t> in, const DecodeOptions& options, Page* page);

// The keys and values sections of `in`, a page DecodePage accepted with `header`.
struct PageSections {
  std::span<const uint8_t> keys;
  std::span<const uint8_t> values;
};
PageSections SectionsOf(std::span<const uint8_t> in, const PageHeader& header);

// residual_rows for the page holding rows [page_begin, page_begin + n_tokens) of a sequence of
// seq_len kept tokens whose last `residual` tokens stay fp16 (KIVI's R).
int64_t KiviResidualRows(int64_t page_begin, int64_t n_tokens, int64_t seq_len,
                         int64_t residual = kKiviResidual);

}  // namespace glimpse::kvpage
