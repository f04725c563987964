#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kv_cache.h"

namespace glimpse::kernels::cuda {
namespace {

using internal::CeilDiv;
using internal::WarpMax;

constexpr float kTinyAbsMax = 7.88860905e-31f;  // core/kvpage's: below it a row encodes as zeros

// One thread per (entry, head, channel).
__global__ void AppendHalfKernel(__half* cache_k, __half* cache_v, const float* k, const float* v,
                                 int64_t n, int64_t first, int64_t capacity, int64_t n_kv_heads,
                                 int64_t head_dim) {
  const int64_t at = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (at >= n * n_kv_heads * head_dim) return;
  const int64_t c = at % head_dim, g = (at / head_dim) % n_kv_heads;
  const int64_t t = at / (head_dim * n_kv_heads);
  const int64_t dst = (g * capacity + first + t) * head_dim + c;
  cache_k[dst] = __float2half_rn(k[at]);
  cache_v[dst] = __float2half_rn(v[at]);
}

// One warp per (entry, head) row of keys or values (blockIdx.y: 0 keys, 1 values).
__global__ void AppendInt8Kernel(KvCacheView cache, const float* k, const float* v, int64_t n,
                                 int64_t first, int64_t n_kv_heads, int64_t head_dim) {
  const int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n * n_kv_heads) return;
  const bool keys = blockIdx.y == 0;
  const float* x = (keys ? k : v) + row * head_dim;  // row = t·n_kv_heads + g
  const int64_t t = row / n_kv_heads, g = row % n_kv_heads;
  const int64_t slot = g * cache.capacity + first + t;
  float absmax = 0.0f;
  for (int64_t c = lane; c < head_dim; c += 32) absmax = fmaxf(absmax, fabsf(x[c]));
  absmax = WarpMax(absmax);
  const bool tiny = absmax < kTinyAbsMax;
  const float scale = tiny ? 0.0f : absmax / 127.0f, inv = tiny ? 0.0f : 127.0f / absmax;
  int8_t* codes = static_cast<int8_t*>(keys ? cache.k : cache.v) + slot * head_dim;
  for (int64_t c = lane; c < head_dim; c += 32) {
    const float r = rintf(__fmul_rn(x[c], inv));
    codes[c] = static_cast<int8_t>(fminf(fmaxf(r, -127.0f), 127.0f));
  }
  if (lane == 0) (keys ? cache.k_scale : cache.v_scale)[slot] = scale;
}

// One thread per (head, entry, channel) of the staging.
__global__ void DecodeInt8Kernel(__half* k16, __half* v16, KvCacheView cache, int64_t n,
                                 int64_t n_kv_heads, int64_t head_dim) {
  const int64_t at = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (at >= n_kv_heads * n * head_dim) return;
  const int64_t c = at % head_dim, i = (at / head_dim) % n, g = at / (head_dim * n);
  const int64_t slot = g * cache.capacity + i;
  const auto* kc = static_cast<const int8_t*>(cache.k);
  const auto* vc = static_cast<const int8_t*>(cache.v);
  k16[at] = __float2half_rn(static_cast<float>(kc[slot * head_dim + c]) * cache.k_scale[slot]);
  v16[at] = __float2half_rn(static_cast<float>(vc[slot * head_dim + c]) * cache.v_scale[slot]);
}

}  // namespace

KvPageView KvCacheView::Page(int64_t g, int64_t first, int64_t rows, const int32_t* pos,
                             int64_t head_dim) const {
  const int64_t slot = g * capacity + first;
  const int64_t bytes = dtype == KvDType::kI8 ? 1 : 2;
  const bool scaled = dtype == KvDType::kI8;
  return {.dtype = dtype,
          .k = static_cast<const uint8_t*>(k) + slot * head_dim * bytes,
          .v = static_cast<const uint8_t*>(v) + slot * head_dim * bytes,
          .k_scale = scaled ? k_scale + slot : nullptr,
          .v_scale = scaled ? v_scale + slot : nullptr,
          .pos = pos + first,
          .rows = rows};
}

cudaError_t AppendKv(const KvCacheView& cache, const float* k, const float* v, int64_t n,
                     int64_t first, int64_t n_kv_heads, int64_t head_dim, cudaStream_t stream) {
  if (first < 0 || first + n > cache.capacity) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (cache.dtype == KvDType::kF16) {
    const int64_t total = n * n_kv_heads * head_dim;
    AppendHalfKernel<<<static_cast<unsigned>(CeilDiv(total, 256)), 256, 0, stream>>>(
        static_cast<__half*>(cache.k), static_cast<__half*>(cache.v), k, v, n, first,
        cache.capacity, n_kv_heads, head_dim);
  } else if (cache.dtype == KvDType::kI8) {
    const int64_t rows = n * n_kv_heads;  // 8 warps, 8 rows, per block
    AppendInt8Kernel<<<dim3(static_cast<unsigned>(CeilDiv(rows, 8)), 2), 256, 0, stream>>>(
        cache, k, v, n, first, n_kv_heads, head_dim);
  } else {
    return cudaErrorInvalidValue;
  }
  return internal::LaunchResult();
}

cudaError_t DecodeKvToHalf(void* k16, void* v16, const KvCacheView& cache, int64_t n,
                           int64_t n_kv_heads, int64_t head_dim, cudaStream_t stream) {
  if (cache.dtype != KvDType::kI8 || n > cache.capacity) return cudaErrorInvalidValue;
  const int64_t total = n_kv_heads * n * head_dim;
  if (total == 0) return cudaSuccess;
  DecodeInt8Kernel<<<static_cast<unsigned>(CeilDiv(total, 256)), 256, 0, stream>>>(
      static_cast<__half*>(k16), static_cast<__half*>(v16), cache, n, n_kv_heads, head_dim);
  return internal::LaunchResult();
}

}  // namespace glimpse::kernels::cuda
