// Internal to kernels/cpu: MatMul's two strategies, exposed so tests and benchmarks can run each
// on any m.
#pragma once

#include <cstdint>

#include "kernels/matmul.h"

namespace glimpse::kernels::internal {

// MatMul uses MatMulDot for m <= kMatMulDotMaxM and MatMulPanels above: with few tokens,
// re-reading the quantised rows per token is cheaper than dequantising W to fp32. Measured on one
// Zen 3 core (Q4_1 576×576, 1536×576, 576×1536, cold weights): MatMulDot is 7–30 % faster up to
// m = 6 and 20–35 % slower at m = 8, where sgemm's 4- and 8-row kernels pay off.
constexpr int64_t kMatMulDotMaxM = 6;

// Rows of W dequantised per sgemm call for a row length of `cols`.
int64_t MatMulPanelRows(int64_t cols);

// out[m, rows] via DotRows over fp32 x (weights decoded in registers), rows split across the pool.
void MatMulDot(float* out, const float* x, const WeightView& w, int64_t m, ThreadPool& pool);

// out[m, rows] via fp32 panels of dequantised W rows and OpenBLAS sgemm (F32 weights directly).
void MatMulPanels(float* out, const float* x, const WeightView& w, int64_t m, ThreadPool& pool);

}  // namespace glimpse::kernels::internal
