// Internal to kernels/cpu: MatMul's two strategies, exposed so tests and benchmarks can run each
// on any m.
#pragma once

#include <cstdint>

#include "kernels/matmul.h"

namespace glimpse::kernels::internal {

// MatMul uses MatMulDot for m <= kMatMulDotMaxM and MatMulPanels above: with few tokens, decoding
// the quantised rows in registers (each block once for up to 4 tokens) beats dequantising W to
// fp32 for sgemm. A decode step over 8–16 sequences is in this range. Measured 2026-11-26 on the
// 2-core development machine (AMD EPYC, Zen 5), the default model, 2 threads (bench/model_bench.cc
// --batch 8): 311 tok/s with MatMulDot for every matrix, 215 with panels for the Q4_1 layers (1
// sequence: ~170). Alone, the Q4_1 layers are FMA-bound (~44 µs per token for 576×1536 at any m,
// panels 39 at m = 8 on one core) and the Q8_0 49152×576 output matrix memory-bound (2.2 ms per
// token at m = 1, 1.15 at m = 8, panels 1.46).
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
