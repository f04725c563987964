// Internal to kernels/cpu: the scalar reference of AttendRagged (two passes over `scratch`), which
// the AVX2 path is tested against and which serves head_dim values the fast path does not.
#pragma once

#include <cstdint>

namespace glimpse::kernels::internal {

// One query row of the references: scores[j] = q·k_j·scale for visible entries (kv_pos[j] <=
// q_pos), −inf otherwise. Returns the maximum (−inf when nothing is visible).
float VisibleScores(float* scores, const float* q, int32_t q_pos, const float* k,
                    const int32_t* kv_pos, float scale, int64_t n_kv, int64_t head_dim);

void AttendRaggedRef(float* out, const float* q, const int32_t* q_pos, const float* k,
                     const float* v, const int32_t* kv_pos, float scale, float* scratch,
                     int64_t n_q, int64_t n_kv, int64_t head_dim);

}  // namespace glimpse::kernels::internal
