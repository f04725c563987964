#include "kernels/cuda/matmul.h"

namespace glimpse::kernels::cuda {
namespace {

cudaDataType_t CudaType(Precision p) { return p == Precision::kF16 ? CUDA_R_16F : CUDA_R_16BF; }

}  // namespace

Blas::Blas(cudaStream_t stream) : stream_(stream) {
  if (cublasCreate(&handle_) != CUBLAS_STATUS_SUCCESS) {
    handle_ = nullptr;
    return;
  }
  cublasSetStream(handle_, stream);
}

Blas::~Blas() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

cublasStatus_t MatMulLowPrecision(Blas& blas, float* out, const void* x16, const DeviceWeight& w,
                                  int64_t m) {
  if (!blas.ok()) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m == 0 || w.rows == 0) return CUBLAS_STATUS_SUCCESS;
  // Column-major view: outᵀ[rows, m] = W[rows, cols] · xᵀ[cols, m]; row-major W is a
  // column-major Wᵀ with leading dimension cols, hence op(A) = T.
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t type = CudaType(w.precision);
  return cublasGemmEx(blas.handle(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows),
                      static_cast<int>(m), static_cast<int>(w.cols), &alpha, w.data, type,
                      static_cast<int>(w.cols), x16, type, static_cast<int>(w.cols), &beta, out,
                      CUDA_R_32F, static_cast<int>(w.rows), CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT);
}

cublasStatus_t MatMul(Blas& blas, float* out, const float* x, const DeviceWeight& w, int64_t m,
                      void* x_scratch) {
  if (RoundTo(x_scratch, w.precision, x, m * w.cols, blas.stream()) != cudaSuccess) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return MatMulLowPrecision(blas, out, x_scratch, w, m);
}

}  // namespace glimpse::kernels::cuda
