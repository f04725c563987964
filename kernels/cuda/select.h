// Eviction's last steps on the device: which entries of each (layer, kv-head) row to keep, and
// the cache those entries make.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kv_cache.h"

namespace glimpse::kernels::cuda {

// For each of `rows` rows of n scores: the indices of its k best entries, ascending (the order a
// compacted cache keeps them in), kept: [rows, k]. "Best" is core/eviction's order within a row:
// higher score first, then lower index; +inf ranks above every finite score (how a caller forces
// sinks and the observation window in), NaN below every other. 0 <= k <= n; scores: [rows, n].
cudaError_t TopKRows(int32_t* kept, const float* scores, int64_t rows, int64_t n, int64_t k,
                     cudaStream_t stream);

// The kept entries of every kv-head of `src` gathered into `dst` (same format, capacity >= k):
// dst entry i of head g is src entry kept[g, i], its bytes (and int8 scale) copied unchanged, and
// dst_pos[g, i] = src_pos[kept[g, i]]. kept: [n_kv_heads, k] (TopKRows' rows, one per head);
// src_pos: [src capacity] positions of src's entries; dst_pos: [n_kv_heads, k]. `dst` and `src`
// must not overlap.
cudaError_t CompactKv(const KvCacheView& dst, int32_t* dst_pos, const KvCacheView& src,
                      const int32_t* src_pos, const int32_t* kept, int64_t k, int64_t n_kv_heads,
                      int64_t head_dim, cudaStream_t stream);

}  // namespace glimpse::kernels::cuda
