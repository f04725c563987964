#include "kernels/cpu/quant_internal.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/quant.h"

namespace glimpse::kernels::cuda {
namespace {

using internal::Bf16Bits;
using internal::CeilDiv;
using internal::HalfBits;
using kernels::internal::BlockQ4_0;
using kernels::internal::BlockQ4_1;
using kernels::internal::BlockQ4_K;
using kernels::internal::BlockQ5_K;
using kernels::internal::BlockQ6_K;
using kernels::internal::BlockQ8_0;
using kernels::internal::GetScaleMinK4;

constexpr int kThreads = 256;

template <typename T>
__device__ __forceinline__ T Round(float x);
template <>
__device__ __forceinline__ __half Round<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 Round<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Plain formats: one thread per element.
template <typename T>
__global__ void PlainKernel(T* out, const void* in, DType type, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float x;
  if (type == DType::kF32) {
    x = static_cast<const float*>(in)[i];
  } else if (type == DType::kF16) {
    x = HalfBits(static_cast<const uint16_t*>(in)[i]);
  } else {
    x = Bf16Bits(static_cast<const uint16_t*>(in)[i]);
  }
  out[i] = Round<T>(x);
}

// 32-element block formats: one thread per element; `n` elements in blocks of 32.
template <typename T>
__global__ void Block32Kernel(T* out, const uint8_t* in, DType type, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t b = i / 32;
  const int j = static_cast<int>(i % 32);
  float x;
  if (type == DType::kQ8_0) {
    const auto& blk = reinterpret_cast<const BlockQ8_0*>(in)[b];
    x = HalfBits(blk.d) * static_cast<float>(blk.qs[j]);
  } else {
    const uint8_t* qs = type == DType::kQ4_0 ? reinterpret_cast<const BlockQ4_0*>(in)[b].qs
                                             : reinterpret_cast<const BlockQ4_1*>(in)[b].qs;
    const int nib = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
    if (type == DType::kQ4_0) {
      x = HalfBits(reinterpret_cast<const BlockQ4_0*>(in)[b].d) * static_cast<float>(nib - 8);
    } else {
      const auto& blk = reinterpret_cast<const BlockQ4_1*>(in)[b];
      x = HalfBits(blk.d) * static_cast<float>(nib) + HalfBits(blk.m);
    }
  }
  out[i] = Round<T>(x);
}

// K-quants: one thread per element of a 256-element super-block (ggml's dequantize_row_q*_K, in
// the order kernels/cpu's DequantizeBlockK writes them).
template <typename T>
__global__ void BlockKKernel(T* out, const uint8_t* in, DType type, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t b = i / 256;
  const int e = static_cast<int>(i % 256);
  float x;
  if (type == DType::kQ6_K) {
    const auto& blk = reinterpret_cast<const BlockQ6_K*>(in)[b];
    const int half = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
    const uint8_t* ql = blk.ql + 64 * half;
    const uint8_t* qh = blk.qh + 32 * half;
    const int8_t* sc = blk.scales + 8 * half;
    // Quarters 0..3 take the low nibbles of ql[l], ql[l + 32], then their high nibbles.
    const uint8_t packed = ql[l + 32 * (quarter % 2)];
    const int lo = quarter < 2 ? packed & 0xF : packed >> 4;
    const int q = (lo | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
    x = HalfBits(blk.d) * static_cast<float>(sc[l / 16 + 2 * quarter]) * static_cast<float>(q);
  } else {
    const bool q5 = type == DType::kQ5_K;
    const auto* b4 = reinterpret_cast<const BlockQ4_K*>(in) + b;
    const auto* b5 = reinterpret_cast<const BlockQ5_K*>(in) + b;
    const float d = HalfBits(q5 ? b5->d : b4->d), dmin = HalfBits(q5 ? b5->dmin : b4->dmin);
    const uint8_t* scales = q5 ? b5->scales : b4->scales;
    const uint8_t* ql = (q5 ? b5->qs : b4->qs) + 32 * (e / 64);
    const int g = e / 64, sub = (e % 64) / 32, l = e % 32;
    uint8_t sc, m;
    GetScaleMinK4(2 * g + sub, scales, &sc, &m);
    const int nib = sub == 0 ? (ql[l] & 0xF) : (ql[l] >> 4);
    const int hi = q5 ? ((b5->qh[l] >> (2 * g + sub)) & 1) << 4 : 0;
    x = d * sc * static_cast<float>(nib + hi) - dmin * m;
  }
  out[i] = Round<T>(x);
}

template <typename T>
__global__ void RoundKernel(T* out, const float* x, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = Round<T>(x[i]);
}

template <typename T>
cudaError_t Dequantize(T* out, const void* in, DType type, int64_t n, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(CeilDiv(n, kThreads));
  const auto* bytes = static_cast<const uint8_t*>(in);
  switch (type) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      PlainKernel<T><<<blocks, kThreads, 0, stream>>>(out, in, type, n);
      break;
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ8_0:
      Block32Kernel<T><<<blocks, kThreads, 0, stream>>>(out, bytes, type, n);
      break;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      BlockKKernel<T><<<blocks, kThreads, 0, stream>>>(out, bytes, type, n);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return internal::LaunchResult();
}

}  // namespace

cudaError_t DequantizeRows(void* out, Precision precision, const void* in, DType type, int64_t rows,
                           int64_t cols, cudaStream_t stream) {
  if (cols % BlockElems(type) != 0) return cudaErrorInvalidValue;
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  // Rows are contiguous and whole blocks, so the matrix decodes as one run of n elements.
  if (precision == Precision::kF16) {
    return Dequantize(static_cast<__half*>(out), in, type, n, stream);
  }
  return Dequantize(static_cast<__nv_bfloat16*>(out), in, type, n, stream);
}

cudaError_t RoundTo(void* out, Precision precision, const float* x, int64_t n,
                    cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(CeilDiv(n, kThreads));
  if (precision == Precision::kF16) {
    RoundKernel<<<blocks, kThreads, 0, stream>>>(static_cast<__half*>(out), x, n);
  } else {
    RoundKernel<<<blocks, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(out), x, n);
  }
  return internal::LaunchResult();
}

}  // namespace glimpse::kernels::cuda
