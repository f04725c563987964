// TopKRows: one block per row, a radix select over 64-bit keys that order entries exactly as
// core/eviction does (the score's bits made monotone, then the index reversed), 8 bits a pass:
// every key is distinct, so after 8 passes the k-th key is known and the kept set is exact. The
// kept indices are then written in index order by a block-wide prefix count.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/select.h"

namespace glimpse::kernels::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

// Larger key = better entry: score descending (NaN lowest), then index ascending.
__device__ __forceinline__ uint64_t Key(float score, int64_t index) {
  uint32_t bits = __float_as_uint(score + 0.0f);  // −0 → +0: they tie, as in core/eviction
  if (isnan(score)) {
    bits = 0;  // below every other score's key
  } else {
    bits = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;  // monotone in the score
  }
  return (static_cast<uint64_t>(bits) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(index));
}

// Exclusive prefix sum of `x` over the block; `total` gets the block's sum. Every thread calls.
__device__ int BlockExclusiveScan(int x, int* total, int* warp_sums) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int inclusive = x;
  for (int o = 1; o < 32; o *= 2) {
    const int y = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += y;
  }
  __syncthreads();
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int w = lane < kWarps ? warp_sums[lane] : 0;
    for (int o = 1; o < 32; o *= 2) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    if (lane < kWarps) warp_sums[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  *total = warp_sums[kWarps - 1];
  return (warp > 0 ? warp_sums[warp - 1] : 0) + inclusive - x;
}

__global__ void __launch_bounds__(kThreads)
    TopKKernel(int32_t* kept, const float* scores, int64_t n, int64_t k) {
  __shared__ int histogram[256];
  __shared__ uint64_t prefix_s;
  __shared__ int64_t remaining_s;
  __shared__ int warp_sums[kWarps];
  const float* row = scores + blockIdx.x * n;
  int32_t* out = kept + blockIdx.x * k;
  if (k == 0) return;
  if (threadIdx.x == 0) {
    prefix_s = 0;
    remaining_s = k;  // how many of the best still to find among keys matching the prefix
  }
  // Pass p fixes bits [56 − 8p, 64 − 8p) of the k-th best key.
  for (int pass = 0; pass < 8; ++pass) {
    const int shift = 56 - 8 * pass;
    for (int b = threadIdx.x; b < 256; b += kThreads) histogram[b] = 0;
    __syncthreads();
    const uint64_t prefix = prefix_s;
    const uint64_t mask = pass == 0 ? 0 : ~uint64_t{0} << (shift + 8);
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const uint64_t key = Key(row[i], i);
      if ((key & mask) == prefix) atomicAdd(&histogram[(key >> shift) & 0xFF], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // walk the bins from the best down to the one holding the k-th
      int64_t need = remaining_s;
      int bin = 255;
      for (; bin > 0 && histogram[bin] < need; --bin) need -= histogram[bin];
      prefix_s = prefix | (static_cast<uint64_t>(bin) << shift);
      remaining_s = need;
    }
    __syncthreads();
  }
  const uint64_t threshold = prefix_s;  // the k-th best key: keep every key >= it
  int written = 0;
  for (int64_t base = 0; base < n; base += kThreads) {
    const int64_t i = base + threadIdx.x;
    const int keep = i < n && Key(row[i], i) >= threshold ? 1 : 0;
    int total;
    const int at = BlockExclusiveScan(keep, &total, warp_sums);
    if (keep) out[written + at] = static_cast<int32_t>(i);
    written += total;
  }
}

// One thread per (head, kept entry, 16-byte chunk of its row); the first chunk's thread also
// copies the scale and the position.
__global__ void CompactKernel(KvCacheView dst, int32_t* dst_pos, KvCacheView src,
                              const int32_t* src_pos, const int32_t* kept, int64_t k,
                              int64_t n_kv_heads, int64_t row_bytes) {
  const int64_t chunks = row_bytes / 16;
  const int64_t at = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (at >= n_kv_heads * k * chunks) return;
  const int64_t c = at % chunks, i = (at / chunks) % k, g = at / (chunks * k);
  const int64_t from = g * src.capacity + kept[g * k + i], to = g * dst.capacity + i;
  for (int side = 0; side < 2; ++side) {
    const auto* s = static_cast<const uint4*>(side == 0 ? src.k : src.v);
    auto* d = static_cast<uint4*>(side == 0 ? dst.k : dst.v);
    d[to * chunks + c] = s[from * chunks + c];
  }
  if (c != 0) return;
  if (src.dtype == KvDType::kI8) {
    dst.k_scale[to] = src.k_scale[from];
    dst.v_scale[to] = src.v_scale[from];
  }
  dst_pos[g * k + i] = src_pos[kept[g * k + i]];
}

}  // namespace

cudaError_t TopKRows(int32_t* kept, const float* scores, int64_t rows, int64_t n, int64_t k,
                     cudaStream_t stream) {
  if (k < 0 || k > n || n > 0xFFFFFFFFll) return cudaErrorInvalidValue;
  if (rows == 0 || k == 0) return cudaSuccess;
  TopKKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(kept, scores, n, k);
  return internal::LaunchResult();
}

cudaError_t CompactKv(const KvCacheView& dst, int32_t* dst_pos, const KvCacheView& src,
                      const int32_t* src_pos, const int32_t* kept, int64_t k, int64_t n_kv_heads,
                      int64_t head_dim, cudaStream_t stream) {
  const int64_t row_bytes = head_dim * (src.dtype == KvDType::kI8 ? 1 : 2);
  if (dst.dtype != src.dtype || (src.dtype != KvDType::kF16 && src.dtype != KvDType::kI8) ||
      k > dst.capacity || row_bytes % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t total = n_kv_heads * k * (row_bytes / 16);
  if (total == 0) return cudaSuccess;
  CompactKernel<<<static_cast<unsigned>(internal::CeilDiv(total, 256)), 256, 0, stream>>>(
      dst, dst_pos, src, src_pos, kept, k, n_kv_heads, row_bytes);
  return internal::LaunchResult();
}

}  // namespace glimpse::kernels::cuda
