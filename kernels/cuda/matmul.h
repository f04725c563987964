// Linear layers on the device: out[m, rows] = x[m, cols] · W[rows, cols]ᵀ, as kernels/matmul.h,
// through cuBLAS with 16-bit inputs and fp32 accumulation and output.
//
// W is decoded once at load (cuda::DequantizeRows) into a DeviceWeight; activations are rounded to
// the same precision per call. So a result differs from the CPU's fp32 product by the two 16-bit
// roundings (weights and activations), not by any summation shortcut: cuBLAS accumulates in fp32.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/quant.h"

namespace glimpse::kernels::cuda {

// One weight matrix in device memory, [rows, cols] row-major 16-bit elements of `precision`.
// Not owning.
struct DeviceWeight {
  const void* data = nullptr;
  Precision precision = Precision::kF16;
  int64_t rows = 0;
  int64_t cols = 0;
};

// A cuBLAS handle bound to one stream. Thread-compatible: one per thread or stream.
class Blas {
 public:
  // Creates the handle; ok() says whether that worked (it fails without a device).
  explicit Blas(cudaStream_t stream);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  bool ok() const { return handle_ != nullptr; }
  cublasHandle_t handle() const { return handle_; }
  cudaStream_t stream() const { return stream_; }

 private:
  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// out[m, w.rows] (fp32) = x[m, w.cols] (fp32) · Wᵀ, queued on blas's stream. `x_scratch` holds
// m·w.cols 16-bit elements (x rounded to w.precision). Returns CUBLAS_STATUS_SUCCESS once queued.
cublasStatus_t MatMul(Blas& blas, float* out, const float* x, const DeviceWeight& w, int64_t m,
                      void* x_scratch);

// The same product from activations already in w.precision (x16: [m, w.cols]).
cublasStatus_t MatMulLowPrecision(Blas& blas, float* out, const void* x16, const DeviceWeight& w,
                                  int64_t m);

}  // namespace glimpse::kernels::cuda
