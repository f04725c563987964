// The KV page pool: memory for the KV caches of many sequences under one budget (a worker's
// kv_memory). A page holds up to page_tokens entries of one (layer, kv-head) of one sequence in one
// format (kernels::KvDType), laid out so that attention reads it directly (kernels::KvPageView).
// Row formats (fp32, fp16, bf16, int8, fp8_e4m3: core/kvpage's per-token codecs):
//
//   keys     [P, head_dim] elements            P = page_tokens, elements of the format's size
//   values   [P, head_dim] elements
//   k_scale  [P] fp32                          int8 and fp8 only: x = code · scale[row]
//   v_scale  [P] fp32
//
// Group formats (kivi4, kivi2): a page is always full, its keys then its values each one
// core/kvpage KIVI section of P rows without residual (codec.h's layout, byte for byte), so P must
// be a multiple of the KIVI group (32). How a cache fills such pages: kv_cache.h.
//
// Positions are not in the page: the cache keeps them per head (kv_cache.h).
//
// Pages are allocated on first use and kept for reuse in per-format free lists; the budget counts
// every page the pool holds, used or free, so the pool's memory never exceeds it. When a format has
// no free page and the budget is spent, free pages of other formats are released to make room.
// Thread-safe: workers' sequences allocate and free concurrently; a page's bytes belong to the
// cache that holds it.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "kernels/attention.h"

namespace glimpse::model {

inline constexpr int kKvDTypes = 7;  // kernels::KvDType values

class KvPool {
 public:
  struct Options {
    int64_t budget_bytes = 0;  // 0: no budget (a private pool)
    int32_t page_tokens = 64;  // P
    int32_t head_dim = 0;
  };

  explicit KvPool(const Options& options);
  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  // Bytes of one page of `dtype`.
  int64_t PageBytes(kernels::KvDType dtype) const;
  // A page of `dtype` (64-byte aligned, contents undefined), or nullptr when the budget cannot hold
  // another page even after releasing every free page.
  uint8_t* Allocate(kernels::KvDType dtype);
  // Returns a page Allocate(dtype) gave.
  void Free(kernels::KvDType dtype, uint8_t* page);
  // A page of `to` in place of `page` (of `from`), whose bytes count as free for it: a full pool
  // can still turn a page into a smaller format. `page` is gone when this returns a page (its
  // contents are not copied); on nullptr (no room even so) it is untouched and still in use.
  uint8_t* Exchange(kernels::KvDType from, uint8_t* page, kernels::KvDType to);

  struct Stats {
    int64_t budget_bytes = 0;                     // 0: none
    int64_t held_bytes = 0;                       // pages the pool holds, used or free
    int64_t used_bytes = 0;                       // pages in use
    std::array<int64_t, kKvDTypes> used_pages{};  // by format
    std::array<int64_t, kKvDTypes> free_pages{};
  };
  Stats stats() const;

  int32_t page_tokens() const { return options_.page_tokens; }
  int32_t head_dim() const { return options_.head_dim; }
  int64_t budget_bytes() const { return options_.budget_bytes; }

 private:
  // Releases free pages of formats other than `keep` until `bytes` more fit; true when they do.
  bool MakeRoom(int64_t bytes, kernels::KvDType keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;  // constant after construction
  mutable absl::Mutex mu_;
  int64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::array<int64_t, kKvDTypes> used_ ABSL_GUARDED_BY(mu_){};
  std::array<std::vector<uint8_t*>, kKvDTypes> free_lists_ ABSL_GUARDED_BY(mu_);
};

// Element bytes of a row format: 4, 2, 2, 1, 1 (0 for group formats).
int64_t KvElementBytes(kernels::KvDType dtype);
// Whether rows of the format carry a scale (int8, fp8).
bool KvScaled(kernels::KvDType dtype);
// Whether the format quantises groups of rows (kivi4, kivi2).
bool KvGrouped(kernels::KvDType dtype);
// The format of a cache's pages that are still filling: fp16 for group formats (KIVI's fp16
// residual), the format itself otherwise.
kernels::KvDType KvFillingFormat(kernels::KvDType dtype);
// Bytes of one KIVI section (keys or values) of `rows` rows without residual.
int64_t KvGroupedSectionBytes(kernels::KvDType dtype, bool keys, int64_t rows, int64_t head_dim);
// "fp32", "fp16", "bf16", "int8", "fp8_e4m3", "kivi4", "kivi2" (the core/kvpage codec names).
const char* KvDTypeName(kernels::KvDType dtype);

}  // namespace glimpse::model
