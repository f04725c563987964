// Internal to kernels/cpu: MatMul's two strategies, exposed so tests and benchmarks can run each
// on any m.
#pragma once

#include <cstdint>

#include "kernels/matmul.h"

namespace glimpse::kernels::internal {

// MatMul uses MatMulDot for m <= kMatMulDotMaxM and MatMulPanels above: with few tokens,
// re-reading the quantised rows per token is cheaper than dequantising W to fp32.
constexpr int64_t kMatMulDotMaxM = 4;

// Rows of W dequantised per sgemm call for a row length of `cols`.
int64_t MatMulPanelRows(int64_t cols);

// out[m, rows] via DotRow: each x row quantised once (Q8_0 for block weights), rows split across
// the pool.
void MatMulDot(float* out, const float* x, const WeightView& w, int64_t m, ThreadPool& pool);

// out[m, rows] via fp32 panels of dequantised W rows and OpenBLAS sgemm (F32 weights directly).
void MatMulPanels(float* out, const float* x, const WeightView& w, int64_t m, ThreadPool& pool);

}  // namespace glimpse::kernels::internal
