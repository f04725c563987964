// Internal to kernels/cpu: the scalar references of AttendRagged, AttendPaged and DequantizeKvRow,
// which the AVX2 paths are tested against and which serve head_dim values the fast path does not.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/attention.h"

namespace glimpse::kernels::internal {

// One query row of the references: scores[j] = q·k_j·scale for visible entries (kv_pos[j] <=
// q_pos), −inf otherwise. Returns the maximum (−inf when nothing is visible).
float VisibleScores(float* scores, const float* q, int32_t q_pos, const float* k,
                    const int32_t* kv_pos, float scale, int64_t n_kv, int64_t head_dim);

void AttendRaggedRef(float* out, const float* q, const int32_t* q_pos, const float* k,
                     const float* v, const int32_t* kv_pos, float scale, float* scratch,
                     int64_t n_q, int64_t n_kv, int64_t head_dim);

// OCP E4M3FN code → fp32 (bias 7, subnormals m·2^−9, 0x7F / 0xFF NaN).
float E4m3ToFp32(uint8_t code);

void DequantizeKvRowRef(float* x, KvDType dtype, const void* data, const float* scales, int64_t r,
                        int64_t head_dim);

// Every page's rows dequantised and concatenated, then AttendRaggedRef.
void AttendPagedRef(float* out, const float* q, const int32_t* q_pos,
                    std::span<const KvPageView> pages, float scale, int64_t n_q, int64_t head_dim);

}  // namespace glimpse::kernels::internal
