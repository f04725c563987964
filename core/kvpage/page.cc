// Page encoding and validated decoding (byte layout in page.h).
#include "core/kvpage/page.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/kvpage/codec_internal.h"
#include "core/kvpage/convert_internal.h"
#include "core/kvpage/crc32c.h"

namespace glimpse::kvpage {
namespace {

static_assert(std::endian::native == std::endian::little, "page layout assumes little-endian");

// Header field offsets (page.h).
constexpr size_t kOffMagic = 0, kOffVersion = 4, kOffCodec = 6, kOffFlags = 7, kOffTokens = 8,
                 kOffHeadDim = 10, kOffResidual = 12, kOffReserved = 14, kOffLayer = 16,
                 kOffKvHead = 20, kOffModel = 24, kOffStateKey = 40, kOffPayload = 56, kOffCrc = 60;
constexpr uint8_t kFlagSummaryFp32 = 1;

template <typename T>
void Put(uint8_t* p, size_t off, T v) {
  std::memcpy(p + off, &v, sizeof(T));
}
template <typename T>
T Get(const uint8_t* p, size_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof(T));
  return v;
}

// Byte offsets of the payload parts, relative to the start of the page.
struct Layout {
  size_t summary, positions, keys, values, end;
};

Layout LayoutOf(const CodecInfo& codec, int64_t n, int64_t hd, int64_t residual,
                SummaryType summary) {
  Layout l;
  l.summary = kPageHeaderBytes;
  l.positions = l.summary + 2 * hd * (summary == SummaryType::kFp32 ? 4 : 2);
  l.keys = l.positions + 4 * n;
  l.values = l.keys + codec.section_bytes(Role::kKeys, n, hd, residual);
  l.end = l.values + codec.section_bytes(Role::kValues, n, hd, residual);
  return l;
}

absl::Status CheckShape(const CodecInfo& codec, int64_t n, int64_t hd, int64_t residual) {
  if (n < 1 || n > kMaxPageTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("page n_tokens ", n, " is outside 1..", kMaxPageTokens));
  }
  if (hd < 1 || hd > kMaxHeadDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("page head_dim ", hd, " is outside 1..", kMaxHeadDim));
  }
  if (residual < 0 || residual > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("page residual_rows ", residual, " is outside 0..n_tokens (", n, ")"));
  }
  if (residual != 0 && !codec.supports_residual) {
    return absl::InvalidArgumentError(absl::StrCat("codec ", codec.name, " keeps no fp16 residual",
                                                   " rows, but residual_rows is ", residual));
  }
  return absl::OkStatus();
}

absl::Status CheckPositions(const int32_t* pos, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (pos[i] < 0 || (i > 0 && pos[i] <= pos[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "page positions must be ≥ 0 and strictly increasing, but position[", i, "] is ", pos[i],
          i > 0 ? absl::StrCat(" after ", pos[i - 1]) : std::string()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<const CodecInfo*> LookUp(Codec codec) {
  const CodecInfo* info = FindCodec(static_cast<uint8_t>(codec));
  if (info == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown page codec id ", static_cast<int>(codec)));
  }
  return info;
}

// Per-channel min and max of keys [n, hd], written as fp16 (rounded outwards) or fp32.
void WriteSummary(const float* keys, int64_t n, int64_t hd, SummaryType type, uint8_t* out) {
  float mn[kMaxHeadDim], mx[kMaxHeadDim];
  std::copy(keys, keys + hd, mn);
  std::copy(keys, keys + hd, mx);
  for (int64_t t = 1; t < n; ++t) {
    const float* row = keys + t * hd;
    for (int64_t c = 0; c < hd; ++c) {
      mn[c] = row[c] < mn[c] ? row[c] : mn[c];
      mx[c] = row[c] > mx[c] ? row[c] : mx[c];
    }
  }
  if (type == SummaryType::kFp32) {
    std::memcpy(out, mn, 4 * hd);
    std::memcpy(out + 4 * hd, mx, 4 * hd);
    return;
  }
  int64_t c = 0;
#ifdef GLIMPSE_KVPAGE_AVX2
  for (; c + 8 <= hd; c += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * c),
                     _mm256_cvtps_ph(_mm256_loadu_ps(mn + c), _MM_FROUND_TO_NEG_INF));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * (hd + c)),
                     _mm256_cvtps_ph(_mm256_loadu_ps(mx + c), _MM_FROUND_TO_POS_INF));
  }
#endif
  for (; c < hd; ++c) {
    Put<uint16_t>(out, 2 * c, internal::FloatToHalfDown(mn[c]));
    Put<uint16_t>(out, 2 * (hd + c), internal::FloatToHalfUp(mx[c]));
  }
}

void WriteHeader(const PageView& page, Codec codec, const EncodeOptions& options, uint32_t payload,
                 uint8_t* out) {
  std::memset(out, 0, kPageHeaderBytes);
  Put<uint32_t>(out, kOffMagic, kPageMagic);
  Put<uint16_t>(out, kOffVersion, kPageFormatVersion);
  Put<uint8_t>(out, kOffCodec, static_cast<uint8_t>(codec));
  Put<uint8_t>(out, kOffFlags, options.summary == SummaryType::kFp32 ? kFlagSummaryFp32 : 0);
  Put<uint16_t>(out, kOffTokens, static_cast<uint16_t>(page.n_tokens));
  Put<uint16_t>(out, kOffHeadDim, static_cast<uint16_t>(page.head_dim));
  Put<uint16_t>(out, kOffResidual, static_cast<uint16_t>(options.residual_rows));
  Put<uint32_t>(out, kOffLayer, page.layer);
  Put<uint32_t>(out, kOffKvHead, page.kv_head);
  std::memcpy(out + kOffModel, page.model.data(), 16);
  std::memcpy(out + kOffStateKey, page.state_key.data(), 16);
  Put<uint32_t>(out, kOffPayload, payload);
}

uint32_t PageCrc(const uint8_t* page, size_t total) {
  const uint32_t crc = Crc32cExtend(0, page, kOffCrc);
  return Crc32cExtend(crc, page + kPageHeaderBytes, total - kPageHeaderBytes);
}

}  // namespace

std::string ToHex(const std::array<uint8_t, 16>& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(32, '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    s[2 * i] = kDigits[bytes[i] >> 4];
    s[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return s;
}

absl::StatusOr<size_t> EncodedSize(const PageView& page, Codec codec,
                                   const EncodeOptions& options) {
  ASSIGN_OR_RETURN(const CodecInfo* info, LookUp(codec));
  RETURN_IF_ERROR(CheckShape(*info, page.n_tokens, page.head_dim, options.residual_rows));
  if (options.summary != SummaryType::kFp16 && options.summary != SummaryType::kFp32) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown summary type ", static_cast<int>(options.summary)));
  }
  return LayoutOf(*info, page.n_tokens, page.head_dim, options.residual_rows, options.summary).end;
}

absl::StatusOr<size_t> EncodePage(const PageView& page, Codec codec, std::span<uint8_t> out,
                                  const EncodeOptions& options) {
  ASSIGN_OR_RETURN(const size_t total, EncodedSize(page, codec, options));
  if (out.size() < total) {
    return absl::ResourceExhaustedError(
        absl::StrCat("page needs ", total, " bytes but the output buffer holds ", out.size()));
  }
  if (page.keys == nullptr || page.values == nullptr || page.positions == nullptr) {
    return absl::InvalidArgumentError("page keys, values and positions must not be null");
  }
  RETURN_IF_ERROR(CheckPositions(page.positions, page.n_tokens));
  const CodecInfo& info = *FindCodec(static_cast<uint8_t>(codec));
  const int64_t n = page.n_tokens, hd = page.head_dim, r = options.residual_rows;
  const Layout l = LayoutOf(info, n, hd, r, options.summary);
  uint8_t* p = out.data();
  // The summary first, so that the keys are still in cache when the codec reads them.
  WriteSummary(page.keys, n, hd, options.summary, p + l.summary);
  if (!options.keys_section.empty() || !options.values_section.empty()) {
    if (options.keys_section.size() != l.values - l.keys ||
        options.values_section.size() != l.end - l.values) {
      return absl::InvalidArgumentError(absl::StrCat(
          "encoded sections of ", options.keys_section.size(), " and ",
          options.values_section.size(), " bytes; codec ", info.name, " needs ", l.values - l.keys,
          " and ", l.end - l.values, " for ", n, " tokens × head_dim ", hd, " (residual ", r, ")"));
    }
    std::memcpy(p + l.keys, options.keys_section.data(), options.keys_section.size());
    std::memcpy(p + l.values, options.values_section.data(), options.values_section.size());
  } else {
    RETURN_IF_ERROR(info.encode(Role::kKeys, page.keys, n, hd, r, p + l.keys));
    RETURN_IF_ERROR(info.encode(Role::kValues, page.values, n, hd, r, p + l.values));
  }
  WriteHeader(page, codec, options, static_cast<uint32_t>(total - kPageHeaderBytes), p);
  std::memcpy(p + l.positions, page.positions, 4 * n);
  Put<uint32_t>(p, kOffCrc, PageCrc(p, total));
  return total;
}

absl::StatusOr<PageHeader> ParsePageHeader(std::span<const uint8_t> in) {
  if (in.size() < kPageHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat("page is ", in.size(), " bytes, shorter than its 64-byte header"));
  }
  const uint8_t* p = in.data();
  if (const uint32_t magic = Get<uint32_t>(p, kOffMagic); magic != kPageMagic) {
    return absl::InvalidArgumentError(absl::StrCat("not a KV page: magic 0x", absl::Hex(magic),
                                                   ", expected 0x", absl::Hex(kPageMagic)));
  }
  PageHeader h;
  h.format_version = Get<uint16_t>(p, kOffVersion);
  if (h.format_version != kPageFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat("page format version ", h.format_version,
                                                      "; this build reads version ",
                                                      kPageFormatVersion));
  }
  const uint8_t codec_id = Get<uint8_t>(p, kOffCodec);
  const CodecInfo* info = FindCodec(codec_id);
  if (info == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown page codec id ", codec_id));
  }
  h.codec = info->id;
  const uint8_t flags = Get<uint8_t>(p, kOffFlags);
  const uint16_t reserved = Get<uint16_t>(p, kOffReserved);
  if ((flags & ~kFlagSummaryFp32) != 0 || reserved != 0) {
    return absl::InvalidArgumentError(absl::StrCat("page flags 0x", absl::Hex(flags),
                                                   " / reserved 0x", absl::Hex(reserved),
                                                   " set bits this version does not define"));
  }
  h.summary = (flags & kFlagSummaryFp32) ? SummaryType::kFp32 : SummaryType::kFp16;
  h.n_tokens = Get<uint16_t>(p, kOffTokens);
  h.head_dim = Get<uint16_t>(p, kOffHeadDim);
  h.residual_rows = Get<uint16_t>(p, kOffResidual);
  RETURN_IF_ERROR(CheckShape(*info, h.n_tokens, h.head_dim, h.residual_rows));
  h.layer = Get<uint32_t>(p, kOffLayer);
  h.kv_head = Get<uint32_t>(p, kOffKvHead);
  std::memcpy(h.model.data(), p + kOffModel, 16);
  std::memcpy(h.state_key.data(), p + kOffStateKey, 16);
  h.payload_bytes = Get<uint32_t>(p, kOffPayload);
  h.crc32c = Get<uint32_t>(p, kOffCrc);
  const Layout l = LayoutOf(*info, h.n_tokens, h.head_dim, h.residual_rows, h.summary);
  if (h.payload_bytes != l.end - kPageHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page payload_length ", h.payload_bytes, " does not match the ", l.end - kPageHeaderBytes,
        " bytes that codec ", info->name, " needs for ", h.n_tokens, " tokens × head_dim ",
        h.head_dim, " (residual ", h.residual_rows, ")"));
  }
  return h;
}

absl::StatusOr<Page> DecodePage(std::span<const uint8_t> in, const DecodeOptions& options) {
  Page page;
  RETURN_IF_ERROR(DecodePageInto(in, options, &page));
  return page;
}

absl::Status DecodePageInto(std::span<const uint8_t> in, const DecodeOptions& options, Page* page) {
  ASSIGN_OR_RETURN(page->header, ParsePageHeader(in));
  const PageHeader& h = page->header;
  if (in.size() != h.total_bytes()) {
    return absl::DataLossError(absl::StrCat("page input is ", in.size(), " bytes but its header",
                                            " says ", h.total_bytes()));
  }
  if (const uint32_t crc = PageCrc(in.data(), in.size()); crc != h.crc32c) {
    return absl::DataLossError(absl::StrCat("page CRC32C mismatch: stored 0x", absl::Hex(h.crc32c),
                                            ", computed 0x", absl::Hex(crc)));
  }
  if (options.expected_model.has_value() && *options.expected_model != h.model) {
    return absl::FailedPreconditionError(absl::StrCat("page was made by model ", ToHex(h.model),
                                                      ", expected model ",
                                                      ToHex(*options.expected_model)));
  }
  const CodecInfo& info = *FindCodec(static_cast<uint8_t>(h.codec));
  const int64_t n = h.n_tokens, hd = h.head_dim, r = h.residual_rows;
  const Layout l = LayoutOf(info, n, hd, r, h.summary);
  const uint8_t* p = in.data();
  page->key_min.resize(hd);
  page->key_max.resize(hd);
  if (h.summary == SummaryType::kFp32) {
    std::memcpy(page->key_min.data(), p + l.summary, 4 * hd);
    std::memcpy(page->key_max.data(), p + l.summary + 4 * hd, 4 * hd);
  } else {
    internal::DecodeHalfRows(p + l.summary, hd, page->key_min.data());
    internal::DecodeHalfRows(p + l.summary + 2 * hd, hd, page->key_max.data());
  }
  for (int64_t c = 0; c < hd; ++c) {
    if (!(page->key_min[c] <= page->key_max[c])) {
      return absl::InvalidArgumentError(absl::StrCat("page key summary of channel ", c, ": min ",
                                                     page->key_min[c], " > max ",
                                                     page->key_max[c]));
    }
  }
  page->positions.resize(n);
  std::memcpy(page->positions.data(), p + l.positions, 4 * n);
  RETURN_IF_ERROR(CheckPositions(page->positions.data(), n));
  page->keys.resize(n * hd);
  page->values.resize(n * hd);
  info.decode(Role::kKeys, p + l.keys, n, hd, r, page->keys.data());
  info.decode(Role::kValues, p + l.values, n, hd, r, page->values.data());
  return absl::OkStatus();
}

PageSections SectionsOf(std::span<const uint8_t> in, const PageHeader& h) {
  const Layout l = LayoutOf(*FindCodec(static_cast<uint8_t>(h.codec)), h.n_tokens, h.head_dim,
                            h.residual_rows, h.summary);
  return {.keys = in.subspan(l.keys, l.values - l.keys),
          .values = in.subspan(l.values, l.end - l.values)};
}

int64_t KiviResidualRows(int64_t page_begin, int64_t n_tokens, int64_t seq_len, int64_t residual) {
  const int64_t first_residual = std::max<int64_t>(0, seq_len - residual);
  return std::clamp<int64_t>(page_begin + n_tokens - first_residual, 0, n_tokens);
}

}  // namespace glimpse::kvpage
