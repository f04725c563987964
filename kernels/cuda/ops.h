// CUDA twins of kernels/ops.h: the same arguments and results (device pointers), plus the stream
// they are queued on. Each returns the launch's error (cudaSuccess once queued); a kernel's own
// failure surfaces at the stream's next synchronisation. Results equal the CPU reference's up to
// fp32 rounding (the device's expf, sinf and cosf), as ops_test.cc states per op.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops.h"

namespace glimpse::kernels::cuda {

cudaError_t RmsNorm(float* out, const float* x, const float* w, float eps, int64_t rows,
                    int64_t dim, cudaStream_t stream);
cudaError_t Rope(float* x, const int32_t* pos, const float* inv_freq, RopeStyle style,
                 int64_t n_tokens, int64_t n_heads, int64_t head_dim, cudaStream_t stream);
cudaError_t SiluMul(float* out, const float* gate, const float* up, int64_t n, cudaStream_t stream);
cudaError_t AddBias(float* x, const float* bias, int64_t rows, int64_t dim, cudaStream_t stream);
cudaError_t Add(float* x, const float* y, int64_t n, cudaStream_t stream);
cudaError_t SoftmaxRows(float* x, int64_t rows, int64_t n, cudaStream_t stream);

// out[r] = index of the largest x[r, :] (the first such on ties), as a greedy sampler picks;
// x: [rows, n] (logits), out: [rows].
cudaError_t ArgmaxRows(int32_t* out, const float* x, int64_t rows, int64_t n, cudaStream_t stream);

// out[t, :] = table[ids[t], :] in fp32; table: [vocab, dim] fp16 (the embedding after
// cuda::DequantizeRows); ids outside [0, vocab) give a zero row.
cudaError_t EmbedRows(float* out, const void* table_f16, const int32_t* ids, int64_t n,
                      int64_t vocab, int64_t dim, cudaStream_t stream);

}  // namespace glimpse::kernels::cuda
