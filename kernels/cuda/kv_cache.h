// A sequence's KV cache on the device, head-major per layer (KvStrides::HeadMajor): the rows of
// one kv-head are contiguous, so 64-entry pages of it are KvPageViews without a copy. Entries are
// fp16, or int8 with a per-row fp32 scale exactly as core/kvpage's int8 codec encodes them
// (scale = max|x| / 127, codes x·127/max|x| rounded to nearest even and clamped to ±127; a row
// whose max|x| is below 7.9e-31 gets scale 0), so a page of it ships as that codec's section.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention.h"

namespace glimpse::kernels::cuda {

// One layer's cache: `capacity` entries of n_kv_heads heads. kF16: k, v are [n_kv_heads, capacity,
// head_dim] fp16. kI8: k, v are [n_kv_heads, capacity, head_dim] int8 codes and k_scale, v_scale
// [n_kv_heads, capacity] fp32.
struct KvCacheView {
  KvDType dtype = KvDType::kF16;
  void* k = nullptr;
  void* v = nullptr;
  float* k_scale = nullptr;
  float* v_scale = nullptr;
  int64_t capacity = 0;

  // The page of kv-head g over entries [first, first + rows), positions from `pos` (entry i at
  // pos[i]).
  KvPageView Page(int64_t g, int64_t first, int64_t rows, const int32_t* pos,
                  int64_t head_dim) const;
};

// Stores entries [first, first + n): cache[g, first + t] = k[t, g, :] (and v), k, v:
// [n, n_kv_heads, head_dim] fp32, post-RoPE keys, finite. cudaErrorInvalidValue past the capacity
// or for another dtype.
cudaError_t AppendKv(const KvCacheView& cache, const float* k, const float* v, int64_t n,
                     int64_t first, int64_t n_kv_heads, int64_t head_dim, cudaStream_t stream);

// Entries [0, n) of an int8 cache decoded into fp16 [n_kv_heads, n, head_dim] arrays k16, v16
// (KvStrides::HeadMajor(n, head_dim)): what the prefill's tensor-core attention reads.
cudaError_t DecodeKvToHalf(void* k16, void* v16, const KvCacheView& cache, int64_t n,
                           int64_t n_kv_heads, int64_t head_dim, cudaStream_t stream);

}  // namespace glimpse::kernels::cuda
