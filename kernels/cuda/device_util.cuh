// Internal to kernels/cuda: element decoding shared by the kernels (bit for bit the CPU
// reference's), warp reductions and the launch result every entry point returns.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace glimpse::kernels::cuda::internal {

inline constexpr int kWarp = 32;

// The error of the launch just made (a bad configuration), without waiting for the kernel.
inline cudaError_t LaunchResult() { return cudaGetLastError(); }

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

__device__ __forceinline__ float HalfBits(uint16_t h) { return __half2float(__ushort_as_half(h)); }

__device__ __forceinline__ float Bf16Bits(uint16_t h) { return __uint_as_float(uint32_t{h} << 16); }

// OCP E4M3FN code → fp32, as kernels/cpu's E4m3ToFp32: bias 7, subnormals m·2^−9, 0x7F NaN.
__device__ __forceinline__ float E4m3Bits(uint8_t code) {
  const int em = code & 0x7F;
  float v;
  if (em == 0x7F) {
    v = __int_as_float(0x7fc00000);
  } else if ((em >> 3) == 0) {
    v = ldexpf(static_cast<float>(em), -9);
  } else {
    v = ldexpf(static_cast<float>(8 + (em & 7)), (em >> 3) - 10);
  }
  return (code & 0x80) ? -v : v;
}

__device__ __forceinline__ float WarpSum(float x) {
  for (int o = kWarp / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float WarpMax(float x) {
  for (int o = kWarp / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Sum over a block of `blockDim.x` threads (a multiple of 32, at most 1024); every thread gets it.
// `shared` holds 32 floats. Contains __syncthreads: every thread of the block must call it.
__device__ __forceinline__ float BlockSum(float x, float* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  x = WarpSum(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < blockDim.x / kWarp ? shared[lane] : 0.0f;
  return WarpSum(x);
}

__device__ __forceinline__ float BlockMax(float x, float* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  x = WarpMax(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < blockDim.x / kWarp ? shared[lane] : -INFINITY;
  return WarpMax(x);
}

}  // namespace glimpse::kernels::cuda::internal
