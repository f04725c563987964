#include "core/model/kv_cache.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/kvpage/codec.h"

namespace glimpse::model {
kvpage::Codec RowCodec(kernels::KvDType dtype) {
  switch (dtype) {
    case kernels::KvDType::kF32:
      return kvpage::Codec::kFp32;
    case kernels::KvDType::kF16:
      return kvpage::Codec::kFp16;
    case kernels::KvDType::kBF16:
      return kvpage::Codec::kBf16;
    case kernels::KvDType::kI8:
      return kvpage::Codec::kInt8;
    case kernels::KvDType::kE4M3:
      return kvpage::Codec::kFp8E4M3;
  }
  return kvpage::Codec::kFp32;
}

KvCache::KvCache(int32_t n_layers, int32_t n_kv_heads, int32_t head_dim, KvPool* pool,
                 kernels::KvDType dtype)
    : n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      own_pool_(pool == nullptr ? std::make_unique<KvPool>(KvPool::Options{.head_dim = head_dim})
                                : nullptr),
      pool_(pool != nullptr ? pool : own_pool_.get()),
      dtype_(pool != nullptr ? dtype : kernels::KvDType::kF32),
      page_tokens_(pool_->page_tokens()),
      heads_(static_cast<size_t>(n_layers) * n_kv_heads) {}

KvCache::~KvCache() { Clear(); }

KvCache::KvCache(KvCache&& other) noexcept
    : n_layers_(other.n_layers_),
      n_kv_heads_(other.n_kv_heads_),
      head_dim_(other.head_dim_),
      own_pool_(std::move(other.own_pool_)),
      pool_(other.pool_),
      dtype_(other.dtype_),
      page_tokens_(other.page_tokens_),
      heads_(std::move(other.heads_)) {
  other.heads_.clear();
}

KvCache& KvCache::operator=(KvCache&& other) noexcept {
  if (this == &other) return *this;
  Clear();
  n_layers_ = other.n_layers_;
  n_kv_heads_ = other.n_kv_heads_;
  head_dim_ = other.head_dim_;
  own_pool_ = std::move(other.own_pool_);
  pool_ = other.pool_;
  dtype_ = other.dtype_;
  page_tokens_ = other.page_tokens_;
  heads_ = std::move(other.heads_);
  other.heads_.clear();
  return *this;
}

uint8_t* KvCache::KeyRow(uint8_t* page, int64_t slot) const {
  return page + slot * head_dim_ * KvElementBytes(dtype_);
}

uint8_t* KvCache::ValueRow(uint8_t* page, int64_t slot) const {
  return page + (page_tokens_ + slot) * head_dim_ * KvElementBytes(dtype_);
}

float* KvCache::KeyScale(uint8_t* page) const {
  return reinterpret_cast<float*>(page + 2 * page_tokens_ * head_dim_ * KvElementBytes(dtype_));
}

float* KvCache::ValueScale(uint8_t* page) const { return KeyScale(page) + page_tokens_; }

int64_t KvCache::size(int32_t layer, int32_t kv_head) const {
  return static_cast<int64_t>(heads_[Index(layer, kv_head)].positions.size());
}

std::span<const int32_t> KvCache::positions(int32_t layer, int32_t kv_head) const {
  return heads_[Index(layer, kv_head)].positions;
}

std::vector<kernels::KvPageView> KvCache::Pages(int32_t layer, int32_t kv_head) const {
  const Head& h = heads_[Index(layer, kv_head)];
  std::vector<kernels::KvPageView> views;
  views.reserve(h.pages.size());
  const int64_t n = static_cast<int64_t>(h.positions.size());
  for (size_t p = 0; p < h.pages.size(); ++p) {
    uint8_t* page = h.pages[p];
    const int64_t first = static_cast<int64_t>(p) * page_tokens_;
    views.push_back({.dtype = dtype_,
                     .k = KeyRow(page, 0),
                     .v = ValueRow(page, 0),
                     .k_scale = KvScaled(dtype_) ? KeyScale(page) : nullptr,
                     .v_scale = KvScaled(dtype_) ? ValueScale(page) : nullptr,
                     .pos = h.positions.data() + first,
                     .rows = std::min(page_tokens_, n - first)});
  }
  return views;
}

KvHead KvCache::Read(int32_t layer, int32_t kv_head) const {
  KvHead out;
  const Head& h = heads_[Index(layer, kv_head)];
  out.positions = h.positions;
  const int64_t n = static_cast<int64_t>(h.positions.size());
  out.keys.resize(n * head_dim_);
  out.values.resize(n * head_dim_);
  for (const kernels::KvPageView& p : Pages(layer, kv_head)) {
    const int64_t first = p.pos - h.positions.data();
    for (int64_t r = 0; r < p.rows; ++r) {
      kernels::DequantizeKvRow(out.keys.data() + (first + r) * head_dim_, dtype_, p.k, p.k_scale, r,
                               head_dim_);
      kernels::DequantizeKvRow(out.values.data() + (first + r) * head_dim_, dtype_, p.v, p.v_scale,
                               r, head_dim_);
    }
  }
  return out;
}

absl::Status KvCache::EncodeRows(uint8_t* page, int64_t slot, const float* k, const float* v,
                                 int64_t n) const {
  const kvpage::CodecInfo& codec = *kvpage::FindCodec(static_cast<uint8_t>(RowCodec(dtype_)));
  thread_local std::vector<uint8_t> section;
  const int64_t row_bytes = head_dim_ * KvElementBytes(dtype_);
  const bool scaled = KvScaled(dtype_);
  for (const bool keys : {true, false}) {
    const kvpage::Role role = keys ? kvpage::Role::kKeys : kvpage::Role::kValues;
    section.resize(codec.section_bytes(role, n, head_dim_, 0));
    RETURN_IF_ERROR(codec.encode(role, keys ? k : v, n, head_dim_, 0, section.data()));
    // Per-token codecs' sections: [scale f32 × n] (int8, fp8) then the n rows.
    const uint8_t* rows = section.data() + (scaled ? n * sizeof(float) : 0);
    std::memcpy(keys ? KeyRow(page, slot) : ValueRow(page, slot), rows, n * row_bytes);
    if (scaled) {
      std::memcpy((keys ? KeyScale(page) : ValueScale(page)) + slot, section.data(),
                  n * sizeof(float));
    }
  }
  return absl::OkStatus();
}

absl::Status KvCache::Append(int32_t layer, int32_t kv_head, const float* k, const float* v,
                             const int32_t* pos, int64_t n) {
  if (n <= 0) return absl::OkStatus();
  Head& h = heads_[Index(layer, kv_head)];
  const int64_t have = static_cast<int64_t>(h.positions.size());
  const size_t pages_before = h.pages.size();
  const int64_t pages_after = (have + n + page_tokens_ - 1) / page_tokens_;
  while (static_cast<int64_t>(h.pages.size()) < pages_after) {
    uint8_t* page = pool_->Allocate(dtype_);
    if (page == nullptr) {
      const int64_t wanted = pages_after - static_cast<int64_t>(pages_before);
      FreePagesFrom(h, pages_before);
      const KvPool::Stats s = pool_->stats();
      return absl::ResourceExhaustedError(absl::StrFormat(
          "KV pool full: layer %d kv_head %d needs %d more %s pages of %d bytes; the pool holds "
          "%d of its %d bytes, %d in use",
          layer, kv_head, wanted, KvDTypeName(dtype_), pool_->PageBytes(dtype_), s.held_bytes,
          s.budget_bytes, s.used_bytes));
    }
    h.pages.push_back(page);
  }
  for (int64_t done = 0; done < n;) {
    const int64_t row = have + done;
    const int64_t slot = row % page_tokens_;
    const int64_t run = std::min(n - done, page_tokens_ - slot);
    const absl::Status encoded = EncodeRows(h.pages[row / page_tokens_], slot, k + done * head_dim_,
                                            v + done * head_dim_, run);
    if (!encoded.ok()) {
      FreePagesFrom(h, pages_before);
      return encoded;
    }
    done += run;
  }
  h.positions.insert(h.positions.end(), pos, pos + n);
  return absl::OkStatus();
}

absl::Status KvCache::Assign(int32_t layer, int32_t kv_head, const KvHead& entries) {
  Truncate(layer, kv_head, 0);
  return Append(layer, kv_head, entries.keys.data(), entries.values.data(),
                entries.positions.data(), entries.size());
}

void KvCache::CopyRow(uint8_t* dst_page, int64_t dst_slot, const uint8_t* src_page,
                      int64_t src_slot) const {
  const int64_t row_bytes = head_dim_ * KvElementBytes(dtype_);
  auto* src = const_cast<uint8_t*>(src_page);
  std::memmove(KeyRow(dst_page, dst_slot), KeyRow(src, src_slot), row_bytes);
  std::memmove(ValueRow(dst_page, dst_slot), ValueRow(src, src_slot), row_bytes);
  if (KvScaled(dtype_)) {
    KeyScale(dst_page)[dst_slot] = KeyScale(src)[src_slot];
    ValueScale(dst_page)[dst_slot] = ValueScale(src)[src_slot];
  }
}

absl::Status KvCache::Retain(int32_t layer, int32_t kv_head, const std::vector<int64_t>& keep) {
  if (layer < 0 || layer >= n_layers_ || kv_head < 0 || kv_head >= n_kv_heads_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("no KV head (layer %d, kv_head %d): cache has %d layers × %d kv heads",
                        layer, kv_head, n_layers_, n_kv_heads_));
  }
  Head& h = heads_[Index(layer, kv_head)];
  const int64_t n = static_cast<int64_t>(h.positions.size());
  for (size_t i = 0; i < keep.size(); ++i) {
    const bool in_range = keep[i] >= 0 && keep[i] < n;
    const bool increasing = i == 0 || keep[i] > keep[i - 1];
    if (!in_range || !increasing) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "Retain(layer %d, kv_head %d): index %d at slot %d is %s (head has %d entries)", layer,
          kv_head, keep[i], i, in_range ? "not increasing" : "out of range", n));
    }
  }
  // Compacting in place is safe because keep is strictly increasing: dst <= src always.
  for (size_t dst = 0; dst < keep.size(); ++dst) {
    const int64_t src = keep[dst];
    if (src != static_cast<int64_t>(dst)) {
      CopyRow(h.pages[dst / page_tokens_], static_cast<int64_t>(dst) % page_tokens_,
              h.pages[src / page_tokens_], src % page_tokens_);
    }
    h.positions[dst] = h.positions[src];
  }
  Truncate(layer, kv_head, static_cast<int64_t>(keep.size()));
  return absl::OkStatus();
}

void KvCache::FreePagesFrom(Head& head, size_t first) {
  for (size_t p = first; p < head.pages.size(); ++p) pool_->Free(dtype_, head.pages[p]);
  head.pages.resize(std::min(first, head.pages.size()));
}

void KvCache::Truncate(int32_t layer, int32_t kv_head, int64_t n) {
  Head& h = heads_[Index(layer, kv_head)];
  if (n < static_cast<int64_t>(h.positions.size())) h.positions.resize(n);
  FreePagesFrom(h, static_cast<size_t>((n + page_tokens_ - 1) / page_tokens_));
}

absl::StatusOr<KvCache> KvCache::Clone() const {
  KvCache copy(n_layers_, n_kv_heads_, head_dim_, own_pool_ ? nullptr : pool_, dtype_);
  const int64_t page_bytes = pool_->PageBytes(dtype_);
  for (size_t i = 0; i < heads_.size(); ++i) {
    Head& to = copy.heads_[i];
    for (uint8_t* page : heads_[i].pages) {
      uint8_t* fresh = copy.pool_->Allocate(dtype_);
      if (fresh == nullptr) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "KV pool full: no room to copy a cache of %d pages", TotalBytes() / page_bytes));
      }
      std::memcpy(fresh, page, static_cast<size_t>(page_bytes));
      to.pages.push_back(fresh);
    }
    to.positions = heads_[i].positions;
  }
  return copy;
}

int64_t KvCache::TotalEntries() const {
  int64_t total = 0;
  for (const Head& h : heads_) total += static_cast<int64_t>(h.positions.size());
  return total;
}

int64_t KvCache::TotalBytes() const {
  int64_t pages = 0;
  for (const Head& h : heads_) pages += static_cast<int64_t>(h.pages.size());
  return pages * pool_->PageBytes(dtype_);
}

void KvCache::Clear() {
  for (Head& h : heads_) {
    FreePagesFrom(h, 0);
    h.positions.clear();
  }
}

}  // namespace glimpse::model
