#include "core/model/kv_pool.h"

#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "core/kvpage/codec.h"

namespace glimpse::model {
namespace {

constexpr size_t kAlignment = 64;

size_t Index(kernels::KvDType dtype) { return static_cast<size_t>(dtype); }

}  // namespace

int64_t KvElementBytes(kernels::KvDType dtype) {
  switch (dtype) {
    case kernels::KvDType::kF32:
      return 4;
    case kernels::KvDType::kF16:
    case kernels::KvDType::kBF16:
      return 2;
    case kernels::KvDType::kI8:
    case kernels::KvDType::kE4M3:
      return 1;
    case kernels::KvDType::kKivi4:
    case kernels::KvDType::kKivi2:
      return 0;  // not a row format
  }
  return 4;
}

bool KvScaled(kernels::KvDType dtype) {
  return dtype == kernels::KvDType::kI8 || dtype == kernels::KvDType::kE4M3;
}

bool KvGrouped(kernels::KvDType dtype) {
  return dtype == kernels::KvDType::kKivi4 || dtype == kernels::KvDType::kKivi2;
}

kernels::KvDType KvFillingFormat(kernels::KvDType dtype) {
  return KvGrouped(dtype) ? kernels::KvDType::kF16 : dtype;
}

int64_t KvGroupedSectionBytes(kernels::KvDType dtype, bool keys, int64_t rows, int64_t head_dim) {
  const kvpage::CodecInfo& codec = *kvpage::FindCodec(static_cast<uint8_t>(
      dtype == kernels::KvDType::kKivi4 ? kvpage::Codec::kKivi4 : kvpage::Codec::kKivi2));
  return static_cast<int64_t>(codec.section_bytes(
      keys ? kvpage::Role::kKeys : kvpage::Role::kValues, rows, head_dim, /*residual=*/0));
}

const char* KvDTypeName(kernels::KvDType dtype) {
  switch (dtype) {
    case kernels::KvDType::kF32:
      return "fp32";
    case kernels::KvDType::kF16:
      return "fp16";
    case kernels::KvDType::kBF16:
      return "bf16";
    case kernels::KvDType::kI8:
      return "int8";
    case kernels::KvDType::kE4M3:
      return "fp8_e4m3";
    case kernels::KvDType::kKivi4:
      return "kivi4";
    case kernels::KvDType::kKivi2:
      return "kivi2";
  }
  return "unknown";
}

KvPool::KvPool(const Options& options) : options_(options) {}

KvPool::~KvPool() {
  for (std::vector<uint8_t*>& list : free_lists_) {
    for (uint8_t* page : list) std::free(page);
  }
}

int64_t KvPool::PageBytes(kernels::KvDType dtype) const {
  const int64_t rows = options_.page_tokens, hd = options_.head_dim;
  const int64_t bytes = KvGrouped(dtype)
                            ? KvGroupedSectionBytes(dtype, true, rows, hd) +
                                  KvGroupedSectionBytes(dtype, false, rows, hd)
                            : 2 * rows * hd * KvElementBytes(dtype) +
                                  (KvScaled(dtype) ? 2 * rows * int64_t{sizeof(float)} : 0);
  return (bytes + static_cast<int64_t>(kAlignment) - 1) / kAlignment * kAlignment;
}

bool KvPool::MakeRoom(int64_t bytes, kernels::KvDType keep) {
  auto fits = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return options_.budget_bytes <= 0 || held_bytes_ + bytes <= options_.budget_bytes;
  };
  for (size_t f = 0; f < free_lists_.size() && !fits(); ++f) {
    if (f == Index(keep)) continue;
    const int64_t page_bytes = PageBytes(static_cast<kernels::KvDType>(f));
    while (!free_lists_[f].empty() && !fits()) {
      std::free(free_lists_[f].back());
      free_lists_[f].pop_back();
      held_bytes_ -= page_bytes;
    }
  }
  return fits();
}

uint8_t* KvPool::Allocate(kernels::KvDType dtype) {
  absl::MutexLock lock(&mu_);
  std::vector<uint8_t*>& list = free_lists_[Index(dtype)];
  if (!list.empty()) {
    uint8_t* page = list.back();
    list.pop_back();
    ++used_[Index(dtype)];
    return page;
  }
  const int64_t bytes = PageBytes(dtype);
  if (!MakeRoom(bytes, dtype)) return nullptr;
  auto* page = static_cast<uint8_t*>(std::aligned_alloc(kAlignment, static_cast<size_t>(bytes)));
  if (page == nullptr) return nullptr;
  held_bytes_ += bytes;
  ++used_[Index(dtype)];
  return page;
}

uint8_t* KvPool::Exchange(kernels::KvDType from, uint8_t* page, kernels::KvDType to) {
  absl::MutexLock lock(&mu_);
  std::vector<uint8_t*>& list = free_lists_[Index(to)];
  uint8_t* out = nullptr;
  if (!list.empty()) {
    out = list.back();
    list.pop_back();
    free_lists_[Index(from)].push_back(page);  // kept for reuse, as Free does
  } else {
    const int64_t from_bytes = PageBytes(from), to_bytes = PageBytes(to);
    if (!MakeRoom(to_bytes - from_bytes, to)) return nullptr;
    out = static_cast<uint8_t*>(std::aligned_alloc(kAlignment, static_cast<size_t>(to_bytes)));
    if (out == nullptr) return nullptr;
    std::free(page);
    held_bytes_ += to_bytes - from_bytes;
  }
  --used_[Index(from)];
  ++used_[Index(to)];
  return out;
}

void KvPool::Free(kernels::KvDType dtype, uint8_t* page) {
  if (page == nullptr) return;
  absl::MutexLock lock(&mu_);
  free_lists_[Index(dtype)].push_back(page);
  --used_[Index(dtype)];
}

KvPool::Stats KvPool::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s;
  s.budget_bytes = options_.budget_bytes;
  s.held_bytes = held_bytes_;
  for (size_t f = 0; f < free_lists_.size(); ++f) {
    const int64_t page_bytes = PageBytes(static_cast<kernels::KvDType>(f));
    s.used_pages[f] = used_[f];
    s.free_pages[f] = static_cast<int64_t>(free_lists_[f].size());
    s.used_bytes += used_[f] * page_bytes;
  }
  return s;
}

}  // namespace glimpse::model
