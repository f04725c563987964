#include "core/model/kv_cache.h"

#include <cstdio>
#include <cstdlib>
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
    case kernels::KvDType::kKivi4:
      return kvpage::Codec::kKivi4;
    case kernels::KvDType::kKivi2:
      return kvpage::Codec::kKivi2;
  }
  return kvpage::Codec::kFp32;
}

namespace {

constexpr int64_t kKiviGroupRows = 32;  // kvpage::kKiviGroup: sealed pages hold whole groups

}  // namespace

KvCache::KvCache(int32_t n_layers, int32_t n_kv_heads, int32_t head_dim, KvPool* pool,
                 kernels::KvDType dtype)
    : n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      own_pool_(pool == nullptr ? std::make_unique<KvPool>(KvPool::Options{.head_dim = head_dim})
                                : nullptr),
      pool_(pool != nullptr ? pool : own_pool_.get()),
      dtype_(pool != nullptr ? dtype : kernels::KvDType::kF32),
      filling_(KvFillingFormat(dtype_)),
      seals_(KvGrouped(dtype_) && pool_->page_tokens() % kKiviGroupRows == 0),
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
      filling_(other.filling_),
      seals_(other.seals_),
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
  filling_ = other.filling_;
  seals_ = other.seals_;
  page_tokens_ = other.page_tokens_;
  heads_ = std::move(other.heads_);
  other.heads_.clear();
  return *this;
}

uint8_t* KvCache::KeyRow(uint8_t* page, int64_t slot) const {
  return page + slot * head_dim_ * KvElementBytes(filling_);
}

uint8_t* KvCache::ValueRow(uint8_t* page, int64_t slot) const {
  return page + (page_tokens_ + slot) * head_dim_ * KvElementBytes(filling_);
}

float* KvCache::KeyScale(uint8_t* page) const {
  return reinterpret_cast<float*>(page + 2 * page_tokens_ * head_dim_ * KvElementBytes(filling_));
}

float* KvCache::ValueScale(uint8_t* page) const { return KeyScale(page) + page_tokens_; }

int64_t KvCache::size(int32_t layer, int32_t kv_head) const {
  return static_cast<int64_t>(heads_[Index(layer, kv_head)].positions.size());
}

std::span<const int32_t> KvCache::positions(int32_t layer, int32_t kv_head) const {
  return heads_[Index(layer, kv_head)].positions;
}

kernels::KvPageView KvCache::View(const Head& head, size_t page) const {
  uint8_t* bytes = head.pages[page];
  const int64_t first = static_cast<int64_t>(page) * page_tokens_;
  const int64_t rows = std::min(page_tokens_, static_cast<int64_t>(head.positions.size()) - first);
  if (page < head.sealed) {
    return {.dtype = dtype_,
            .k = bytes,
            .v = bytes + KvGroupedSectionBytes(dtype_, true, page_tokens_, head_dim_),
            .pos = head.positions.data() + first,
            .rows = rows};
  }
  return {.dtype = filling_,
          .k = KeyRow(bytes, 0),
          .v = ValueRow(bytes, 0),
          .k_scale = KvScaled(filling_) ? KeyScale(bytes) : nullptr,
          .v_scale = KvScaled(filling_) ? ValueScale(bytes) : nullptr,
          .pos = head.positions.data() + first,
          .rows = rows};
}

std::vector<kernels::KvPageView> KvCache::Pages(int32_t layer, int32_t kv_head) const {
  const Head& h = heads_[Index(layer, kv_head)];
  std::vector<kernels::KvPageView> views;
  views.reserve(h.pages.size());
  for (size_t p = 0; p < h.pages.size(); ++p) views.push_back(View(h, p));
  return views;
}

KvHead KvCache::Read(int32_t layer, int32_t kv_head) const {
  KvHead out;
  const Head& h = heads_[Index(layer, kv_head)];
  out.positions = h.positions;
  const int64_t n = static_cast<int64_t>(h.positions.size());
  out.keys.resize(n * head_dim_);
  out.values.resize(n * head_dim_);
  for (size_t p = 0; p < h.pages.size(); ++p) {
    const kernels::KvPageView view = View(h, p);
    const int64_t first = static_cast<int64_t>(p) * page_tokens_;
    for (int64_t r = 0; r < view.rows; ++r) {
      kernels::DequantizeKvPageRow(out.keys.data() + (first + r) * head_dim_,
                                   out.values.data() + (first + r) * head_dim_, view, r, head_dim_);
    }
  }
  return out;
}

bool KvCache::SealPage(Head& head) {
  const size_t p = head.sealed;
  const kernels::KvPageView view = View(head, p);
  thread_local std::vector<float> k, v;
  k.resize(page_tokens_ * head_dim_);
  v.resize(page_tokens_ * head_dim_);
  for (int64_t r = 0; r < page_tokens_; ++r) {
    kernels::DequantizeKvPageRow(k.data() + r * head_dim_, v.data() + r * head_dim_, view, r,
                                 head_dim_);
  }
  const kvpage::CodecInfo& codec = *kvpage::FindCodec(static_cast<uint8_t>(RowCodec(dtype_)));
  const int64_t key_bytes = KvGroupedSectionBytes(dtype_, true, page_tokens_, head_dim_);
  thread_local std::vector<uint8_t> encoded;
  encoded.resize(static_cast<size_t>(pool_->PageBytes(dtype_)));
  // fp16 rows are inside KIVI's range, so encoding cannot fail; if it did, the page stays fp16.
  if (!codec.encode(kvpage::Role::kKeys, k.data(), page_tokens_, head_dim_, 0, encoded.data())
           .ok() ||
      !codec
           .encode(kvpage::Role::kValues, v.data(), page_tokens_, head_dim_, 0,
                   encoded.data() + key_bytes)
           .ok()) {
    return false;
  }
  // The fp16 page's bytes count as free for the sealed one, so a full pool still seals.
  uint8_t* sealed = pool_->Exchange(filling_, head.pages[p], dtype_);
  if (sealed == nullptr) return false;
  std::memcpy(sealed, encoded.data(), encoded.size());
  head.pages[p] = sealed;
  ++head.sealed;
  return true;
}

void KvCache::SealHead(Head& head) {
  if (!seals_) return;
  const size_t full = head.positions.size() / static_cast<size_t>(page_tokens_);
  while (head.sealed < full && SealPage(head)) {
  }
}

bool KvCache::HeldSections(int32_t layer, int32_t kv_head, size_t page, std::vector<uint8_t>* keys,
                           std::vector<uint8_t>* values) const {
  const Head& h = heads_[Index(layer, kv_head)];
  if (page >= h.pages.size()) return false;
  const kernels::KvPageView view = View(h, page);
  if (KvGrouped(dtype_)) {
    if (page >= h.sealed) return false;
    const auto* k = static_cast<const uint8_t*>(view.k);
    const auto* v = static_cast<const uint8_t*>(view.v);
    keys->assign(k, k + KvGroupedSectionBytes(dtype_, true, page_tokens_, head_dim_));
    values->assign(v, v + KvGroupedSectionBytes(dtype_, false, page_tokens_, head_dim_));
    return true;
  }
  // Row codecs' sections: [scale f32 × n] (int8, fp8), then the n rows.
  const int64_t rows_bytes = view.rows * head_dim_ * KvElementBytes(dtype_);
  const int64_t scale_bytes = KvScaled(dtype_) ? view.rows * int64_t{sizeof(float)} : 0;
  for (const bool is_keys : {true, false}) {
    std::vector<uint8_t>& out = is_keys ? *keys : *values;
    out.resize(scale_bytes + rows_bytes);
    const float* scales = is_keys ? view.k_scale : view.v_scale;
    if (scale_bytes > 0) std::memcpy(out.data(), scales, scale_bytes);
    std::memcpy(out.data() + scale_bytes, is_keys ? view.k : view.v, rows_bytes);
  }
  return true;
}

bool KvCache::TakesSections(int32_t layer, int32_t kv_head, kvpage::Codec codec, int64_t residual,
                            int64_t n) const {
  if (codec != RowCodec(dtype_) || residual != 0 || n < 1) return false;
  if (!KvGrouped(dtype_)) return true;
  const Head& h = heads_[Index(layer, kv_head)];
  return seals_ && n == page_tokens_ && h.sealed == h.pages.size() &&
         static_cast<int64_t>(h.positions.size()) == static_cast<int64_t>(h.sealed) * page_tokens_;
}

absl::Status KvCache::CheckFollows(const Head& h, int32_t layer, int32_t kv_head,
                                   const int32_t* pos, int64_t n) const {
  for (int64_t i = 0; i < n; ++i) {
    const int32_t before = i > 0 ? pos[i - 1] : h.positions.empty() ? -1 : h.positions.back();
    if (pos[i] <= before) {
      return absl::InvalidArgumentError(
          absl::StrFormat("entries for layer %d kv_head %d: position %d does not follow %d", layer,
                          kv_head, pos[i], before));
    }
  }
  return absl::OkStatus();
}

absl::Status KvCache::AppendSections(int32_t layer, int32_t kv_head, kvpage::Codec codec,
                                     std::span<const uint8_t> keys, std::span<const uint8_t> values,
                                     const int32_t* pos, int64_t n) {
  if (!TakesSections(layer, kv_head, codec, 0, n)) {
    return absl::FailedPreconditionError(
        absl::StrFormat("layer %d kv_head %d cannot take %d entries of %s as they are now", layer,
                        kv_head, n, kvpage::CodecName(codec)));
  }
  const kvpage::CodecInfo& info = *kvpage::FindCodec(static_cast<uint8_t>(codec));
  const size_t key_bytes = info.section_bytes(kvpage::Role::kKeys, n, head_dim_, 0);
  const size_t value_bytes = info.section_bytes(kvpage::Role::kValues, n, head_dim_, 0);
  if (keys.size() != key_bytes || values.size() != value_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d entries of %s × head_dim %d have sections of %d and %d bytes, not %d "
        "and %d",
        n, info.name, head_dim_, key_bytes, value_bytes, keys.size(), values.size()));
  }
  Head& h = heads_[Index(layer, kv_head)];
  RETURN_IF_ERROR(CheckFollows(h, layer, kv_head, pos, n));
  if (KvGrouped(dtype_)) {  // one whole sealed page
    uint8_t* page = pool_->Allocate(dtype_);
    if (page == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("KV pool full: layer %d kv_head %d needs a %s page of %d bytes", layer,
                          kv_head, KvDTypeName(dtype_), pool_->PageBytes(dtype_)));
    }
    std::memcpy(page, keys.data(), keys.size());
    std::memcpy(page + keys.size(), values.data(), values.size());
    h.pages.push_back(page);
    ++h.sealed;
  } else {
    RETURN_IF_ERROR(GrowHead(h, layer, kv_head, n));
    const int64_t have = static_cast<int64_t>(h.positions.size());
    const int64_t row_bytes = head_dim_ * KvElementBytes(dtype_);
    const int64_t scale_bytes = KvScaled(dtype_) ? n * int64_t{sizeof(float)} : 0;
    for (int64_t i = 0; i < n; ++i) {
      uint8_t* page = h.pages[(have + i) / page_tokens_];
      const int64_t slot = (have + i) % page_tokens_;
      std::memcpy(KeyRow(page, slot), keys.data() + scale_bytes + i * row_bytes, row_bytes);
      std::memcpy(ValueRow(page, slot), values.data() + scale_bytes + i * row_bytes, row_bytes);
      if (scale_bytes > 0) {
        std::memcpy(KeyScale(page) + slot, keys.data() + i * sizeof(float), sizeof(float));
        std::memcpy(ValueScale(page) + slot, values.data() + i * sizeof(float), sizeof(float));
      }
    }
  }
  h.positions.insert(h.positions.end(), pos, pos + n);
  return absl::OkStatus();
}

void KvCache::Seal() {
  for (Head& h : heads_) SealHead(h);
}

absl::Status KvCache::EncodeRows(uint8_t* page, int64_t slot, const float* k, const float* v,
                                 int64_t n) const {
  const kvpage::CodecInfo& codec = *kvpage::FindCodec(static_cast<uint8_t>(RowCodec(filling_)));
  thread_local std::vector<uint8_t> section;
  const int64_t row_bytes = head_dim_ * KvElementBytes(filling_);
  const bool scaled = KvScaled(filling_);
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

absl::Status KvCache::GrowHead(Head& h, int32_t layer, int32_t kv_head, int64_t n) {
  const int64_t have = static_cast<int64_t>(h.positions.size());
  const size_t pages_before = h.pages.size();
  const int64_t pages_after = (have + n + page_tokens_ - 1) / page_tokens_;
  while (static_cast<int64_t>(h.pages.size()) < pages_after) {
    uint8_t* page = pool_->Allocate(filling_);
    if (page == nullptr) {
      const int64_t wanted = pages_after - static_cast<int64_t>(pages_before);
      FreePagesFrom(h, pages_before);
      const KvPool::Stats s = pool_->stats();
      return absl::ResourceExhaustedError(absl::StrFormat(
          "KV pool full: layer %d kv_head %d needs %d more %s pages of %d bytes; the pool holds "
          "%d of its %d bytes, %d in use",
          layer, kv_head, wanted, KvDTypeName(filling_), pool_->PageBytes(filling_), s.held_bytes,
          s.budget_bytes, s.used_bytes));
    }
    h.pages.push_back(page);
  }
  return absl::OkStatus();
}

absl::Status KvCache::Append(int32_t layer, int32_t kv_head, const float* k, const float* v,
                             const int32_t* pos, int64_t n) {
  if (n <= 0) return absl::OkStatus();
  Head& h = heads_[Index(layer, kv_head)];
  const int64_t have = static_cast<int64_t>(h.positions.size());
  const size_t pages_before = h.pages.size();
  RETURN_IF_ERROR(GrowHead(h, layer, kv_head, n));
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
  const int64_t row_bytes = head_dim_ * KvElementBytes(filling_);
  auto* src = const_cast<uint8_t*>(src_page);
  std::memmove(KeyRow(dst_page, dst_slot), KeyRow(src, src_slot), row_bytes);
  std::memmove(ValueRow(dst_page, dst_slot), ValueRow(src, src_slot), row_bytes);
  if (KvScaled(filling_)) {
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
  size_t moved = 0;  // the first kept entry that changes place
  while (moved < keep.size() && keep[moved] == static_cast<int64_t>(moved)) ++moved;
  if (moved / static_cast<size_t>(page_tokens_) < h.sealed) {
    // Rows of sealed pages move: decode what is kept from the first changed page on, drop those
    // pages, and append the rows again (sealing page by page, so the pool holds at most one more
    // fp16 page than the result).
    const size_t first = moved / static_cast<size_t>(page_tokens_) * page_tokens_;
    const KvHead all = Read(layer, kv_head);
    KvHead rows;
    for (size_t i = first; i < keep.size(); ++i) {
      const int64_t src = keep[i];
      rows.keys.insert(rows.keys.end(), all.keys.begin() + src * head_dim_,
                       all.keys.begin() + (src + 1) * head_dim_);
      rows.values.insert(rows.values.end(), all.values.begin() + src * head_dim_,
                         all.values.begin() + (src + 1) * head_dim_);
      rows.positions.push_back(all.positions[src]);
    }
    h.positions.resize(first);
    FreePagesFrom(h, first / static_cast<size_t>(page_tokens_));
    return AppendSealing(layer, kv_head, rows);
  }
  // Compacting in place is safe because keep is strictly increasing: dst <= src always; every
  // page written is a filling page (sealed pages end before `moved`).
  for (size_t dst = moved; dst < keep.size(); ++dst) {
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

absl::Status KvCache::AppendSealing(int32_t layer, int32_t kv_head, const KvHead& rows) {
  Head& h = heads_[Index(layer, kv_head)];
  for (int64_t done = 0; done < rows.size();) {
    const int64_t room = page_tokens_ - static_cast<int64_t>(h.positions.size()) % page_tokens_;
    const int64_t n = std::min(room, rows.size() - done);
    RETURN_IF_ERROR(Append(layer, kv_head, rows.keys.data() + done * head_dim_,
                           rows.values.data() + done * head_dim_, rows.positions.data() + done, n));
    SealHead(h);
    done += n;
  }
  return absl::OkStatus();
}

void KvCache::FreePagesFrom(Head& head, size_t first) {
  for (size_t p = first; p < head.pages.size(); ++p) {
    pool_->Free(PageFormat(head, p), head.pages[p]);
  }
  head.pages.resize(std::min(first, head.pages.size()));
  head.sealed = std::min(head.sealed, head.pages.size());
}

void KvCache::Truncate(int32_t layer, int32_t kv_head, int64_t n) {
  Head& h = heads_[Index(layer, kv_head)];
  if (n % page_tokens_ != 0 && static_cast<size_t>(n / page_tokens_) < h.sealed) {
    std::fprintf(stderr, "KvCache::Truncate(layer %d, kv_head %d, %lld) cuts a sealed page\n",
                 layer, kv_head, static_cast<long long>(n));
    std::abort();
  }
  if (n < static_cast<int64_t>(h.positions.size())) h.positions.resize(n);
  FreePagesFrom(h, static_cast<size_t>((n + page_tokens_ - 1) / page_tokens_));
}

absl::StatusOr<KvCache> KvCache::Clone() const {
  KvCache copy(n_layers_, n_kv_heads_, head_dim_, own_pool_ ? nullptr : pool_, dtype_);
  for (size_t i = 0; i < heads_.size(); ++i) {
    const Head& from = heads_[i];
    Head& to = copy.heads_[i];
    for (size_t p = 0; p < from.pages.size(); ++p) {
      const kernels::KvDType format = PageFormat(from, p);
      uint8_t* fresh = copy.pool_->Allocate(format);
      if (fresh == nullptr) {
        return absl::ResourceExhaustedError(
            absl::StrFormat("KV pool full: no room to copy a cache of %d bytes", TotalBytes()));
      }
      std::memcpy(fresh, from.pages[p], static_cast<size_t>(pool_->PageBytes(format)));
      to.pages.push_back(fresh);
      to.sealed = std::min(from.sealed, to.pages.size());
    }
    to.positions = from.positions;
  }
  return copy;
}

int64_t KvCache::BytesIn(kernels::KvDType to) const {
  const bool seals = KvGrouped(to) && page_tokens_ % kKiviGroupRows == 0;
  const int64_t full = pool_->PageBytes(to), filling = pool_->PageBytes(KvFillingFormat(to));
  int64_t bytes = 0;
  for (const Head& h : heads_) {
    const int64_t n = static_cast<int64_t>(h.positions.size());
    if (seals) {
      bytes += n / page_tokens_ * full + (n % page_tokens_ != 0 ? filling : 0);
    } else {
      bytes += (n + page_tokens_ - 1) / page_tokens_ * filling;
    }
  }
  return bytes;
}

absl::Status KvCache::Reencode(kernels::KvDType to) {
  if (own_pool_ != nullptr) {
    return absl::FailedPreconditionError("a cache without a KV pool holds fp32 only");
  }
  KvCache next(n_layers_, n_kv_heads_, head_dim_, pool_, to);
  for (size_t i = 0; i < heads_.size(); ++i) {
    const int32_t layer = static_cast<int32_t>(i) / n_kv_heads_;
    const int32_t kv_head = static_cast<int32_t>(i) % n_kv_heads_;
    const KvHead rows = Read(layer, kv_head);
    FreePagesFrom(heads_[i], 0);
    heads_[i].positions.clear();
    if (absl::Status st = next.AppendSealing(layer, kv_head, rows); !st.ok()) {
      Clear();
      return st;  // `next` gives its pages back
    }
  }
  *this = std::move(next);
  return absl::OkStatus();
}

int64_t KvCache::TotalEntries() const {
  int64_t total = 0;
  for (const Head& h : heads_) total += static_cast<int64_t>(h.positions.size());
  return total;
}

int64_t KvCache::TotalBytes() const {
  int64_t sealed = 0, filling = 0;
  for (const Head& h : heads_) {
    sealed += static_cast<int64_t>(h.sealed);
    filling += static_cast<int64_t>(h.pages.size() - h.sealed);
  }
  return sealed * pool_->PageBytes(dtype_) + filling * pool_->PageBytes(filling_);
}

void KvCache::Clear() {
  for (Head& h : heads_) {
    FreePagesFrom(h, 0);
    h.positions.clear();
  }
}

}  // namespace glimpse::model
