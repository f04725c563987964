// Weights onto the device: every stored format of kernels/quant.h decoded on the device, once, at
// load, into the 16-bit floats the tensor-core GEMM reads (cuda/matmul.h). Decoding is GGML's
// (the same block arithmetic as kernels/cpu's DequantizeRow, in fp32), then one rounding to the
// target precision, so an element differs from the CPU's fp32 value by at most half an fp16 (or
// bf16) ulp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/quant.h"

namespace glimpse::kernels::cuda {

// The 16-bit formats weights and activations take on the device. fp16 keeps 3 more mantissa bits
// than bf16 (the default: GGUF scales are fp16 and small-model weights stay well inside its range);
// bf16 is for checkpoints whose values overflow fp16.
enum class Precision : uint8_t { kF16, kBF16 };

// out[rows, cols] (16-bit elements of `precision`) = `in`, `rows` rows of `cols` elements stored as
// `type` (kernels/quant.h's layouts, rows contiguous). `cols` must be a multiple of
// BlockElems(type). Both pointers are device memory.
cudaError_t DequantizeRows(void* out, Precision precision, const void* in, DType type, int64_t rows,
                           int64_t cols, cudaStream_t stream);

// out[n] = x[n] (fp32, device) rounded to `precision` (to nearest even): the activations a
// tensor-core GEMM or attention reads.
cudaError_t RoundTo(void* out, Precision precision, const float* x, int64_t n, cudaStream_t stream);

}  // namespace glimpse::kernels::cuda
