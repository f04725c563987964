// One block per (128 keys, kv-head); a thread holds one key in registers and walks the window's
// (row, head) pairs, 16 at a time through shared memory.
#include "kernels/cuda/attention_stats.h"
#include "kernels/cuda/device_util.cuh"

namespace glimpse::kernels::cuda {
namespace {

constexpr int kKeys = 128;  // keys per block, one per thread
constexpr int kChunk = 16;  // (row, head) pairs staged per pass

template <int D>
__global__ void __launch_bounds__(kKeys)
    AccumulateKernel(float* acc, const __half* q, const float* lse, const int32_t* q_pos,
                     int64_t row_begin, int64_t row_end, const __half* k, KvStrides kv,
                     const int32_t* kv_pos, float scale, int64_t n_q, int64_t n_kv, int64_t n_heads,
                     int64_t n_kv_heads) {
  __shared__ float qs[kChunk][D];
  __shared__ float row_lse[kChunk];
  __shared__ int32_t row_pos[kChunk];
  const int64_t g = blockIdx.y, group = n_heads / n_kv_heads;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kKeys + threadIdx.x;
  const bool valid = j < n_kv;
  __half2 key[D / 2];
#pragma unroll
  for (int c = 0; c < D / 2; ++c) {
    key[c] = valid ? reinterpret_cast<const __half2*>(k + j * kv.row + g * kv.head)[c]
                   : __float2half2_rn(0.0f);
  }
  const int32_t pos = valid ? kv_pos[j] : 0;
  const int64_t pairs = (row_end - row_begin) * group;
  float sum = 0.0f;
  for (int64_t p0 = 0; p0 < pairs; p0 += kChunk) {
    __syncthreads();
    for (int t = threadIdx.x; t < kChunk * D; t += kKeys) {
      const int64_t pair = p0 + t / D;
      const int c = t % D;
      float x = 0.0f;
      if (pair < pairs) {
        const int64_t i = row_begin + pair / group, h = g * group + pair % group;
        x = __half2float(q[(i * n_heads + h) * D + c]);
      }
      qs[t / D][c] = x;
    }
    if (threadIdx.x < kChunk) {
      const int64_t pair = p0 + threadIdx.x;
      const int64_t i = row_begin + pair / group, h = g * group + pair % group;
      row_lse[threadIdx.x] = pair < pairs ? lse[h * n_q + i] : -INFINITY;
      row_pos[threadIdx.x] = pair < pairs ? q_pos[i] : 0;
    }
    __syncthreads();
    for (int p = 0; p < kChunk; ++p) {
      if (row_lse[p] == -INFINITY || pos > row_pos[p]) continue;
      float s = 0.0f;
#pragma unroll
      for (int c = 0; c < D / 2; ++c) {
        const float2 kf = __half22float2(key[c]);
        s += qs[p][2 * c] * kf.x + qs[p][2 * c + 1] * kf.y;
      }
      sum += expf(s * scale - row_lse[p]);
    }
  }
  if (valid) acc[g * n_kv + j] += sum;
}

template <int D>
void Launch(float* acc, const void* q, const float* lse, const int32_t* q_pos, int64_t row_begin,
            int64_t row_end, const void* k, KvStrides kv, const int32_t* kv_pos, float scale,
            int64_t n_q, int64_t n_kv, int64_t n_heads, int64_t n_kv_heads, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(internal::CeilDiv(n_kv, kKeys)),
                  static_cast<unsigned>(n_kv_heads));
  AccumulateKernel<D><<<grid, kKeys, 0, stream>>>(
      acc, static_cast<const __half*>(q), lse, q_pos, row_begin, row_end,
      static_cast<const __half*>(k), kv, kv_pos, scale, n_q, n_kv, n_heads, n_kv_heads);
}

}  // namespace

cudaError_t AccumulateAttention(float* acc, const void* q, const float* lse, const int32_t* q_pos,
                                int64_t row_begin, int64_t row_end, const void* k, KvStrides kv,
                                const int32_t* kv_pos, float scale, int64_t n_q, int64_t n_kv,
                                int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                cudaStream_t stream) {
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0 || row_begin < 0 || row_end > n_q) {
    return cudaErrorInvalidValue;
  }
  if (n_kv == 0 || row_end <= row_begin) return cudaSuccess;
  switch (head_dim) {
    case 64:
      Launch<64>(acc, q, lse, q_pos, row_begin, row_end, k, kv, kv_pos, scale, n_q, n_kv, n_heads,
                 n_kv_heads, stream);
      break;
    case 128:
      Launch<128>(acc, q, lse, q_pos, row_begin, row_end, k, kv, kv_pos, scale, n_q, n_kv, n_heads,
                  n_kv_heads, stream);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return internal::LaunchResult();
}

}  // namespace glimpse::kernels::cuda
