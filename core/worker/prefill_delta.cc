#include "core/worker/prefill_delta.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/eviction/recall.h"
#include "core/kvpage/crc32c.h"
#include "core/kvstate/cache_pages.h"

namespace glimpse::worker {
namespace {

constexpr uint32_t kMagic = 0x31424447;  // "GDB1"
constexpr uint32_t kMaxHeads = 1u << 20;

// NOTE: positions are hashed as the host's int32 bytes; every supported host is little-endian.
uint32_t PositionsCrc(const std::vector<int32_t>& positions) {
  return kvpage::Crc32c(std::span(reinterpret_cast<const uint8_t*>(positions.data()),
                                  positions.size() * sizeof(int32_t)));
}

void PutU32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint32_t LoadU32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  absl::StatusOr<uint32_t> U32(const char* what) {
    if (bytes_.size() - at_ < 4) {
      return absl::DataLossError(absl::StrCat("delta base truncated at ", what));
    }
    const uint32_t v = LoadU32(bytes_.data() + at_);
    at_ += 4;
    return v;
  }
  absl::Status Bytes(uint8_t* out, size_t n) {
    if (bytes_.size() - at_ < n) return absl::DataLossError("delta base truncated at the key");
    std::memcpy(out, bytes_.data() + at_, n);
    at_ += n;
    return absl::OkStatus();
  }
  size_t left() const { return bytes_.size() - at_; }

 private:
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
};

std::string HeadName(size_t i, int32_t hkv) {
  return absl::StrCat("layer ", i / hkv, " kv-head ", i % hkv);
}

// `hot` without the positions in `dropped`; InvalidArgument when one is not held.
absl::StatusOr<model::KvHead> WithoutDropped(const model::KvHead& hot,
                                             const std::vector<int32_t>& dropped,
                                             const std::string& where) {
  std::vector<int64_t> keep;
  size_t d = 0;
  for (int64_t j = 0; j < hot.size(); ++j) {
    if (d < dropped.size() && dropped[d] == hot.positions[j]) {
      ++d;
      continue;
    }
    keep.push_back(j);
  }
  if (d != dropped.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": position ", dropped[d], " to drop is not held by the hot copy"));
  }
  return eviction::Rows(hot, keep);
}

}  // namespace

std::vector<uint8_t> EncodeDeltaBase(const DeltaBase& base) {
  std::vector<uint8_t> out;
  PutU32(out, kMagic);
  PutU32(out, static_cast<uint32_t>(base.dropped.size()));
  out.insert(out.end(), base.base_key.begin(), base.base_key.end());
  for (size_t i = 0; i < base.dropped.size(); ++i) {
    PutU32(out, base.final_counts[i]);
    PutU32(out, base.final_crcs[i]);
    PutU32(out, static_cast<uint32_t>(base.dropped[i].size()));
    for (int32_t p : base.dropped[i]) PutU32(out, static_cast<uint32_t>(p));
  }
  PutU32(out, kvpage::Crc32c(out));
  return out;
}

absl::StatusOr<DeltaBase> DecodeDeltaBase(std::span<const uint8_t> bytes) {
  if (bytes.size() < 4 ||
      kvpage::Crc32c(bytes.first(bytes.size() - 4)) != LoadU32(bytes.data() + bytes.size() - 4)) {
    return absl::DataLossError("delta base: checksum mismatch or truncated");
  }
  Reader r(bytes.first(bytes.size() - 4));
  ASSIGN_OR_RETURN(const uint32_t magic, r.U32("the magic"));
  if (magic != kMagic) return absl::DataLossError("delta base: bad magic");
  ASSIGN_OR_RETURN(const uint32_t heads, r.U32("the head count"));
  if (heads > kMaxHeads) {
    return absl::DataLossError(absl::StrCat("delta base: ", heads, " heads is absurd"));
  }
  DeltaBase out;
  RETURN_IF_ERROR(r.Bytes(out.base_key.data(), out.base_key.size()));
  for (uint32_t i = 0; i < heads; ++i) {
    ASSIGN_OR_RETURN(const uint32_t count, r.U32("a final count"));
    ASSIGN_OR_RETURN(const uint32_t crc, r.U32("a final CRC"));
    ASSIGN_OR_RETURN(const uint32_t n, r.U32("a dropped count"));
    if (n > r.left() / 4) return absl::DataLossError("delta base: dropped positions truncated");
    std::vector<int32_t> dropped(n);
    for (uint32_t k = 0; k < n; ++k) {
      ASSIGN_OR_RETURN(const uint32_t p, r.U32("a dropped position"));
      dropped[k] = static_cast<int32_t>(p);
      if (k > 0 && dropped[k] <= dropped[k - 1]) {
        return absl::DataLossError("delta base: dropped positions out of order");
      }
    }
    out.final_counts.push_back(count);
    out.final_crcs.push_back(crc);
    out.dropped.push_back(std::move(dropped));
  }
  if (r.left() != 0) return absl::DataLossError("delta base: trailing bytes");
  return out;
}

std::vector<std::vector<int32_t>> HeadPositions(const model::KvCache& cache) {
  std::vector<std::vector<int32_t>> out;
  for (int32_t l = 0; l < cache.n_layers(); ++l) {
    for (int32_t h = 0; h < cache.n_kv_heads(); ++h) {
      const std::span<const int32_t> positions = cache.positions(l, h);
      out.emplace_back(positions.begin(), positions.end());
    }
  }
  return out;
}

absl::StatusOr<Delta> MakeDelta(const std::vector<std::vector<int32_t>>& base_positions,
                                const kvstate::StateKey& base_key, const model::KvCache& after) {
  Delta out{.added = model::KvCache(after.n_layers(), after.n_kv_heads(), after.head_dim())};
  out.base.base_key = base_key;
  const int32_t hkv = after.n_kv_heads();
  for (size_t i = 0; i < base_positions.size(); ++i) {
    const model::KvHead head = after.Read(i / hkv, i % hkv);
    const std::vector<int32_t>& base = base_positions[i];
    std::vector<int64_t> added;
    std::vector<int32_t> dropped;
    size_t b = 0;
    for (int64_t j = 0; j < head.size(); ++j) {
      const int32_t p = head.positions[j];
      while (b < base.size() && base[b] < p) dropped.push_back(base[b++]);
      if (b < base.size() && base[b] == p) {
        ++b;
      } else {
        added.push_back(j);
      }
    }
    dropped.insert(dropped.end(), base.begin() + b, base.end());
    RETURN_IF_ERROR(out.added.Assign(i / hkv, i % hkv, eviction::Rows(head, added)));
    out.base.dropped.push_back(std::move(dropped));
    out.base.final_counts.push_back(static_cast<uint32_t>(head.size()));
    out.base.final_crcs.push_back(PositionsCrc(head.positions));
  }
  return out;
}

absl::Status ApplyDelta(const DeltaBase& base, const kvstate::Manifest& manifest,
                        std::span<const std::span<const uint8_t>> pages, model::KvCache& hot) {
  const int32_t hkv = hot.n_kv_heads();
  const size_t heads = static_cast<size_t>(hot.n_layers()) * hkv;
  if (base.dropped.size() != heads || base.final_counts.size() != heads ||
      base.final_crcs.size() != heads) {
    return absl::InvalidArgumentError(
        absl::StrCat("the delta covers ", base.dropped.size(), " heads; the model has ", heads));
  }
  model::KvCache added(hot.n_layers(), hkv, hot.head_dim());
  RETURN_IF_ERROR(kvstate::LoadPages(manifest, pages, kvstate::LoadTiers::kRetained, &added));
  std::vector<model::KvHead> next(heads);
  for (size_t i = 0; i < heads; ++i) {
    const std::string where = HeadName(i, hkv);
    ASSIGN_OR_RETURN(next[i], WithoutDropped(hot.Read(i / hkv, i % hkv), base.dropped[i], where));
    const model::KvHead more = added.Read(i / hkv, i % hkv);
    const int64_t want = next[i].size() + more.size();
    eviction::AddMissingEntries(next[i], more);
    if (next[i].size() != want || next[i].size() != base.final_counts[i] ||
        PositionsCrc(next[i].positions) != base.final_crcs[i]) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": the hot copy with the delta holds ",
                                                     next[i].size(), " entries, not the ",
                                                     base.final_counts[i], " the prefill kept"));
    }
  }
  for (size_t i = 0; i < heads; ++i) RETURN_IF_ERROR(hot.Assign(i / hkv, i % hkv, next[i]));
  return absl::OkStatus();
}

}  // namespace glimpse::worker
