// Internal to kernels/cpu: the scalar references of AttendRagged, AttendPaged and
// DequantizeKvPageRow, which the AVX2 paths are tested against and which serve head_dim values the
// fast path does not; where a KIVI section's parts lie.
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

// Row `r` of a row format's keys or values (`data`, [rows, head_dim]; `scales` per row for kI8
// and kE4M3).
void DequantizeKvRowRef(float* x, KvDType dtype, const void* data, const float* scales, int64_t r,
                        int64_t head_dim);

// KIVI (kvpage/codec.h): bits per code of a group format, 0 for row formats.
int KiviBits(KvDType dtype);
inline constexpr int64_t kKiviGroup = 32;  // rows per key group, channels per value group

// The parts of one KIVI section of `rows` rows and no residual.
struct KiviSection {
  const uint16_t* scale = nullptr;  // fp16; keys [⌈rows/32⌉, head_dim], values [rows, ⌈hd/32⌉]
  const uint16_t* zero = nullptr;  // as scale
  const uint8_t* codes = nullptr;  // [rows, row_bytes], channel c in bits c·b mod 8 of byte c·b/8
  int64_t row_bytes = 0;           // ⌈head_dim·b/8⌉
};
KiviSection KiviKeys(const void* section, int bits, int64_t rows, int64_t head_dim);
KiviSection KiviValues(const void* section, int bits, int64_t rows, int64_t head_dim);

void DequantizeKvPageRowRef(float* k, float* v, const KvPageView& page, int64_t r,
                            int64_t head_dim);

// Every page's rows dequantised and concatenated, then AttendRaggedRef.
void AttendPagedRef(float* out, const float* q, const int32_t* q_pos,
                    std::span<const KvPageView> pages, float scale, int64_t n_q, int64_t head_dim);

}  // namespace glimpse::kernels::internal
