#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"

namespace glimpse::kernels::cuda {
namespace {

using internal::BlockMax;
using internal::BlockSum;
using internal::CeilDiv;
using internal::LaunchResult;

constexpr int kRowThreads = 256;  // one block per row for the row-wise ops
constexpr int kFlatThreads = 256;

__global__ void RmsNormKernel(float* out, const float* x, const float* w, float eps, int64_t dim) {
  __shared__ float shared[32];
  const float* xr = x + blockIdx.x * dim;
  float* outr = out + blockIdx.x * dim;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
  ss = BlockSum(ss, shared);
  const float inv = rsqrtf(ss / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) outr[i] = xr[i] * inv * w[i];
}

// One thread per (token, head, pair).
__global__ void RopeKernel(float* x, const int32_t* pos, const float* inv_freq, bool interleaved,
                           int64_t n_tokens, int64_t n_heads, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  const int64_t at = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (at >= n_tokens * n_heads * half) return;
  const int64_t i = at % half, h = (at / half) % n_heads, t = at / (half * n_heads);
  const float theta = static_cast<float>(pos[t]) * inv_freq[i];
  float s, c;
  sincosf(theta, &s, &c);
  float* a = x + (t * n_heads + h) * head_dim + (interleaved ? 2 * i : i);
  const int64_t b_off = interleaved ? 1 : half;
  const float x0 = a[0], x1 = a[b_off];
  a[0] = x0 * c - x1 * s;
  a[b_off] = x0 * s + x1 * c;
}

__global__ void SiluMulKernel(float* out, const float* gate, const float* up, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  out[i] = g / (1.0f + expf(-g)) * up[i];
}

__global__ void AddBiasKernel(float* x, const float* bias, int64_t rows, int64_t dim) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < rows * dim) x[i] += bias[i % dim];
}

__global__ void AddKernel(float* x, const float* y, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] += y[i];
}

__global__ void SoftmaxRowsKernel(float* x, int64_t n) {
  __shared__ float shared[32];
  float* xr = x + blockIdx.x * n;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, xr[i]);
  m = BlockMax(m, shared);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += expf(xr[i] - m);
  sum = BlockSum(sum, shared);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) xr[i] = expf(xr[i] - m) / sum;
}

// The larger of two (value, index) candidates; on equal values the smaller index.
__device__ __forceinline__ void TakeBetter(float& v, int32_t& i, float ov, int32_t oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

__global__ void ArgmaxRowsKernel(int32_t* out, const float* x, int64_t n) {
  __shared__ float values[32];
  __shared__ int32_t indices[32];
  const float* xr = x + blockIdx.x * n;
  float best = -INFINITY;
  int32_t at = 0x7fffffff;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) TakeBetter(best, at, xr[i], int32_t(i));
  for (int o = 16; o > 0; o /= 2) {
    TakeBetter(best, at, __shfl_xor_sync(0xffffffffu, best, o),
               __shfl_xor_sync(0xffffffffu, at, o));
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    values[warp] = best;
    indices[warp] = at;
  }
  __syncthreads();
  if (warp != 0) return;
  best = lane < blockDim.x / 32 ? values[lane] : -INFINITY;
  at = lane < blockDim.x / 32 ? indices[lane] : 0x7fffffff;
  for (int o = 16; o > 0; o /= 2) {
    TakeBetter(best, at, __shfl_xor_sync(0xffffffffu, best, o),
               __shfl_xor_sync(0xffffffffu, at, o));
  }
  // A row of NaNs (no candidate ever wins) reports 0, as std::max_element would.
  if (lane == 0) out[blockIdx.x] = at == 0x7fffffff ? 0 : at;
}

__global__ void EmbedRowsKernel(float* out, const __half* table, const int32_t* ids, int64_t vocab,
                                int64_t dim) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  const bool valid = id >= 0 && id < vocab;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    out[t * dim + i] = valid ? __half2float(table[id * dim + i]) : 0.0f;
  }
}

unsigned FlatBlocks(int64_t n) { return static_cast<unsigned>(CeilDiv(n, kFlatThreads)); }

}  // namespace

cudaError_t RmsNorm(float* out, const float* x, const float* w, float eps, int64_t rows,
                    int64_t dim, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  RmsNormKernel<<<rows, kRowThreads, 0, stream>>>(out, x, w, eps, dim);
  return LaunchResult();
}

cudaError_t Rope(float* x, const int32_t* pos, const float* inv_freq, RopeStyle style,
                 int64_t n_tokens, int64_t n_heads, int64_t head_dim, cudaStream_t stream) {
  const int64_t n = n_tokens * n_heads * (head_dim / 2);
  if (n == 0) return cudaSuccess;
  RopeKernel<<<FlatBlocks(n), kFlatThreads, 0, stream>>>(
      x, pos, inv_freq, style == RopeStyle::kInterleaved, n_tokens, n_heads, head_dim);
  return LaunchResult();
}

cudaError_t SiluMul(float* out, const float* gate, const float* up, int64_t n,
                    cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  SiluMulKernel<<<FlatBlocks(n), kFlatThreads, 0, stream>>>(out, gate, up, n);
  return LaunchResult();
}

cudaError_t AddBias(float* x, const float* bias, int64_t rows, int64_t dim, cudaStream_t stream) {
  if (rows * dim == 0) return cudaSuccess;
  AddBiasKernel<<<FlatBlocks(rows * dim), kFlatThreads, 0, stream>>>(x, bias, rows, dim);
  return LaunchResult();
}

cudaError_t Add(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  AddKernel<<<FlatBlocks(n), kFlatThreads, 0, stream>>>(x, y, n);
  return LaunchResult();
}

cudaError_t SoftmaxRows(float* x, int64_t rows, int64_t n, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  SoftmaxRowsKernel<<<rows, kRowThreads, 0, stream>>>(x, n);
  return LaunchResult();
}

cudaError_t ArgmaxRows(int32_t* out, const float* x, int64_t rows, int64_t n, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  ArgmaxRowsKernel<<<rows, kRowThreads, 0, stream>>>(out, x, n);
  return LaunchResult();
}

cudaError_t EmbedRows(float* out, const void* table_f16, const int32_t* ids, int64_t n,
                      int64_t vocab, int64_t dim, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  EmbedRowsKernel<<<n, kRowThreads, 0, stream>>>(out, static_cast<const __half*>(table_f16), ids,
                                                 vocab, dim);
  return LaunchResult();
}

}  // namespace glimpse::kernels::cuda
