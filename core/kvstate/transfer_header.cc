#include "core/kvstate/transfer_header.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace glimpse::kvstate {
namespace {
constexpr uint32_t kMagic = 0x54564B47;  // "GKVT"
constexpr uint16_t kVersion = 1;
}  // namespace

std::array<uint8_t, kBatchHeaderBytes> EncodeBatchHeader(const BatchHeader& h) {
  std::array<uint8_t, kBatchHeaderBytes> out{};
  const uint16_t kind = static_cast<uint16_t>(h.kind);
  std::memcpy(out.data() + 0, &kMagic, 4);
  std::memcpy(out.data() + 4, &kVersion, 2);
  std::memcpy(out.data() + 6, &kind, 2);
  std::memcpy(out.data() + 8, &h.id, 8);
  std::memcpy(out.data() + 16, &h.page_count, 4);
  std::memcpy(out.data() + 20, &h.flags, 4);
  return out;
}

absl::StatusOr<BatchHeader> DecodeBatchHeader(std::span<const uint8_t> in) {
  if (in.size() != kBatchHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch header is ", in.size(), " bytes, expected ", kBatchHeaderBytes));
  }
  uint32_t magic;
  uint16_t version, kind;
  BatchHeader h;
  std::memcpy(&magic, in.data() + 0, 4);
  std::memcpy(&version, in.data() + 4, 2);
  std::memcpy(&kind, in.data() + 6, 2);
  std::memcpy(&h.id, in.data() + 8, 8);
  std::memcpy(&h.page_count, in.data() + 16, 4);
  std::memcpy(&h.flags, in.data() + 20, 4);
  if (magic != kMagic)
    return absl::InvalidArgumentError(absl::StrCat("bad batch magic 0x", absl::Hex(magic)));
  if (version != kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch header version ", version, ", expected ", kVersion));
  }
  if (kind < 1 || kind > 3)
    return absl::InvalidArgumentError(absl::StrCat("unknown batch kind ", kind));
  if ((h.flags & ~BatchHeader::kPacked) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown batch header flags 0x", absl::Hex(h.flags)));
  }
  h.kind = static_cast<BatchKind>(kind);
  return h;
}

absl::StatusOr<std::vector<std::span<const uint8_t>>> UnpackPages(
    const BatchHeader& h, std::span<const std::span<const uint8_t>> bufs,
    std::span<const uint32_t> sizes) {
  if (h.page_count != sizes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch carries ", h.page_count, " pages, the manifest lists ", sizes.size()));
  }
  std::vector<std::span<const uint8_t>> pages;
  pages.reserve(sizes.size());
  if ((h.flags & BatchHeader::kPacked) == 0) {
    if (bufs.size() != sizes.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch carries ", bufs.size(), " page buffers, the manifest lists ", sizes.size()));
    }
    pages.assign(bufs.begin(), bufs.end());
    return pages;  // sizes are checked page by page (CheckPage names the page)
  }
  uint64_t total = 0;
  for (uint32_t s : sizes) total += s;
  uint64_t have = 0;
  for (const auto& b : bufs) have += b.size();
  if (bufs.empty() || have != total) {
    return absl::InvalidArgumentError(
        absl::StrCat("packed batch has ", bufs.size(), " buffer(s) of ", have,
                     " bytes in all; the manifest's pages add up to ", total, " bytes"));
  }
  size_t page = 0;
  for (size_t b = 0; b < bufs.size(); ++b) {
    size_t off = 0;
    const size_t first = page;
    while (off < bufs[b].size() && page < sizes.size() && sizes[page] <= bufs[b].size() - off) {
      pages.push_back(bufs[b].subspan(off, sizes[page]));
      off += sizes[page++];
    }
    if (off != bufs[b].size() || page == first) {
      return absl::InvalidArgumentError(absl::StrCat(
          "packed buffer ", b, " of ", bufs[b].size(), " bytes does not hold whole pages (page ",
          page, " is ", page < sizes.size() ? sizes[page] : 0, " bytes at offset ", off, ")"));
    }
  }
  if (page != sizes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("packed batch holds ", page, " of ",
                                                   sizes.size(), " pages (empty pages left over)"));
  }
  return pages;
}

}  // namespace glimpse::kvstate
