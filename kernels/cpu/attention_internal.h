// Internal to kernels/cpu: the scalar reference of AttendRagged (two passes over `scratch`), which
// the AVX2 path is tested against and which serves head_dim values the fast path does not.
#pragma once

#include <cstdint>

namespace glimpse::kernels::internal {

void AttendRaggedRef(float* out, const float* q, const int32_t* q_pos, const float* k,
                     const float* v, const int32_t* kv_pos, float scale, float* scratch,
                     int64_t n_q, int64_t n_kv, int64_t head_dim);

}  // namespace glimpse::kernels::internal
