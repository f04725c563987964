// CUDA attention, the contracts of kernels/attention.h on the device: causal by position (a query
// at position p sees every entry whose position is <= p, in any order), keys post-RoPE, a row that
// sees nothing gets zeros.
//
// AttendPrefill is the prompt's attention: flash-style tiles of 64 queries × 64 keys with an
// online softmax on tensor cores (fp16 in, fp32 accumulate), never a T×T matrix; it also returns
// each row's log-sum-exp, which is what the eviction scorers need to read any query row's
// attention over all keys afterwards (cuda/attention_stats.h). AttendPagedBatch is decode's: many
// sequences' query rows over their KV pages as stored (every kernels::KvDType), one launch.
//
// Every entry point returns the launch's error (cudaSuccess once queued; cudaErrorInvalidValue for
// arguments outside the stated limits). All pointers are device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention.h"

namespace glimpse::kernels::cuda {

// Where entry j of kv-head g lies in a K or V array: at j·row + g·head elements (rows of head_dim
// contiguous, 16-byte aligned).
struct KvStrides {
  int64_t row = 0;
  int64_t head = 0;
  // A projection's [n_kv, n_kv_heads, head_dim].
  static KvStrides Interleaved(int64_t n_kv_heads, int64_t head_dim) {
    return {n_kv_heads * head_dim, head_dim};
  }
  // A cache's [n_kv_heads, capacity, head_dim] (cuda/kv_cache.h; its pages are views of it).
  static KvStrides HeadMajor(int64_t capacity, int64_t head_dim) {
    return {head_dim, capacity * head_dim};
  }
};

// All heads of one sequence's prompt chunk over its keys (GQA: q-head h reads kv-head
// h / (n_heads / n_kv_heads)).
//   out:    [n_q, n_heads, head_dim] fp32
//   lse:    [n_heads, n_q] fp32, or nullptr: log Σ_j exp(q·k_j·scale) over the visible j, −inf
//           for a row that sees nothing
//   q:      [n_q, n_heads, head_dim] fp16, post-RoPE;   q_pos: [n_q]
//   k, v:   n_kv entries of n_kv_heads heads, fp16, laid out as `kv` says;   kv_pos: [n_kv]
// head_dim is 16, 32, 64 or 128; n_heads a multiple of n_kv_heads. Probabilities are rounded to
// fp16 for the product with V (as FlashAttention does); the normaliser and the output stay fp32.
cudaError_t AttendPrefill(float* out, float* lse, const void* q, const int32_t* q_pos,
                          const void* k, const void* v, KvStrides kv, const int32_t* kv_pos,
                          float scale, int64_t n_q, int64_t n_kv, int64_t n_heads,
                          int64_t n_kv_heads, int64_t head_dim, cudaStream_t stream);

// Most query rows one PagedQuery may carry (decode: the GQA group's heads × one token; a few
// speculative tokens).
inline constexpr int kMaxPagedRows = 8;

// One kv-head of one sequence in a decode step: kernels::AttendPaged's arguments.
struct PagedQuery {
  float* out = nullptr;            // [n_q, head_dim]
  const float* q = nullptr;        // [n_q, head_dim], post-RoPE
  const int32_t* q_pos = nullptr;  // [n_q]
  int32_t n_q = 0;                 // 1 .. kMaxPagedRows
  int32_t page_begin = 0;          // its pages: pages[page_begin, page_end) of the call
  int32_t page_end = 0;
};

// Floats of scratch AttendPagedBatch needs for `n_queries` queries of at most `max_pages` pages.
int64_t PagedScratchFloats(int64_t n_queries, int64_t max_pages, int64_t head_dim);

// For each query, kernels::AttendPaged over its pages: the same values up to fp32 summation
// order. `queries` [n_queries] and `pages` (KvPageViews whose pointers are device memory) are
// device arrays; no query has more than `max_pages` pages; head_dim is a multiple of 8, at most
// 256. Long page lists are split across blocks and merged (flash-decoding), so one sequence's
// decode fills the device too.
cudaError_t AttendPagedBatch(const PagedQuery* queries, int64_t n_queries, const KvPageView* pages,
                             int64_t max_pages, float scale, int64_t head_dim, float* scratch,
                             cudaStream_t stream);

}  // namespace glimpse::kernels::cuda
