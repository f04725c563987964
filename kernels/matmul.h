// Linear layers over stored weights: out[m, rows] = x[m, cols] · W[rows, cols]ᵀ.
//
// W is one weight matrix in its stored DType (row-major, `rows` rows of `cols` elements, the layout
// of both GGUF and Hugging Face Linear weights). The result is always the fp32 product of x with
// the dequantised W (DequantizeRow), up to fp32 summation order: the arithmetic of an fp32
// reference model, so decode and prefill agree with it and with each other. For a few tokens
// (decode) the kernel reads the stored rows with DotRows, decoding them in registers, so decode is
// bound by the quantised bytes, not fp32 ones; for more (prefill) it dequantises panels of W and
// calls OpenBLAS sgemm. Rows are split across the pool's threads. OpenBLAS runs single-threaded
// inside each task.
#pragma once

#include <cstdint>

#include "kernels/cpu/parallel.h"
#include "kernels/quant.h"

namespace glimpse::kernels {

struct WeightView {
  const void* data = nullptr;  // [rows, cols] in `type`
  DType type = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
};

// out[m, w.rows] = x[m, w.cols] · Wᵀ. `out` must not alias `x`.
void MatMul(float* out, const float* x, const WeightView& w, int64_t m, ThreadPool& pool);

}  // namespace glimpse::kernels
