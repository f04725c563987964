// Internal to kernels/cpu: MatMul's two strategies, exposed so tests and benchmarks can run each
// on any m.
#pragma once

#include <cstdint>

#include "kernels/matmul.h"

namespace glimpse::kernels::internal {

// MatMul uses MatMulDot for m <= kMatMulDotMaxM and MatMulPanels above: with few tokens, decoding
// the quantised rows in registers (each block once for up to 4 tokens) beats dequantising W to
// fp32 for sgemm. A decode step over 8–16 sequences is in this range (the measurements behind
// the cut-over: bench/RESULTS.md, "Speed").
// Why batching gains little here: with fp32 activations every token still costs one FMA lane per
// weight, so B tokens cost at least B times one token's FMAs; a step saves only the weight decode
// and the memory traffic (8 sequences per step: 1.3–1.9× one, RESULTS.md "Speed"). llama.cpp
// quantises activations to int8 for integer dot products, cheaper per token but not the fp32
// arithmetic of the oracles (docs/model.md, "Numerics").
constexpr int64_t kMatMulDotMaxM = 16;

// Rows of W dequantised per sgemm call for a row length of `cols`.
int64_t MatMulPanelRows(int64_t cols);

// out[m, rows] via DotRows over fp32 x (weights decoded in registers), rows split across the pool.
void MatMulDot(float* out, const float* x, const WeightView& w, int64_t m, ThreadPool& pool);

// out[m, rows] via fp32 panels of dequantised W rows and OpenBLAS sgemm (F32 weights directly).
void MatMulPanels(float* out, const float* x, const WeightView& w, int64_t m, ThreadPool& pool);

}  // namespace glimpse::kernels::internal
